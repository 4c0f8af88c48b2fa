"""NVIDIA's Xid catalog as data: the shipped file, the Xid table built from it, Xids it does not
list, and `manage.py xid_catalog_refresh` from a sheet (good and bad)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from django.core.management import CommandError, call_command

from webapp.failures import taxonomy, xid_catalog
from webapp.failures.diagnosis import diagnose_text

ROOT = Path(__file__).resolve().parent.parent.parent

# --- The shipped file ------------------------------------------------------------------------


def test_the_shipped_catalog_lists_every_in_use_xid_with_both_resolutions():
    catalog = xid_catalog.catalog_load()
    source = xid_catalog.catalog_source()
    assert len(catalog) == 109  # the catalog's rows marked YES for A100, H100, B100 or GB200
    assert source["url"].startswith("https://docs.nvidia.com/deploy/xid-errors/")
    assert source["catalog_date"] == "2026-12-06"
    # Copy engines, NVDEC / NVJPG / OFA, the GB200 link codes: all there.
    assert {39, 40, 41, 70, 77, 83, 105, 126, 135, 139, 144, 150, 159, 172} <= catalog.keys()
    assert 61 not in catalog  # PMU_BREAKPOINT: unused since Ampere
    for entry in catalog.values():
        assert entry.mnemonic and entry.description and entry.applies_to
        assert entry.immediate in xid_catalog.RESOLUTIONS | {""}, entry
    # Only 162-172 come without a bucket in the catalog.
    assert {c for c, e in catalog.items() if not e.immediate} == set(range(162, 173))


@pytest.mark.parametrize(
    ("code", "immediate", "investigatory"),
    [
        (63, "IGNORE", "IGNORE"),  # row remap pending: never a drain
        (92, "IGNORE", "CONTACT_SUPPORT"),  # high single-bit rate: tell operators only
        (157, "IGNORE", "CONTACT_SUPPORT"),
        (109, "RESET_GPU", "CONTACT_SUPPORT"),  # context-switch timeout: not a job fault
        (136, "RESET_GPU", "INVESTIGATE_LINK_SI"),
        (79, "RESTART_BM", "CONTACT_SUPPORT"),  # off the bus: reboot
        (48, "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
        (45, "WORKFLOW_XID_45", "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)"),
        (154, "XID_154", "N/A Informational only regarding another Xid"),
        (151, "RESTART_VM", "CONTACT_SUPPORT"),
        (159, "CHECK_UVM", "SYMPATHETIC_REPORT_SOLO"),
        (54, "CHECK_MECHANICALS", "CONTACT_SUPPORT"),
        (78, "UPDATE_SWFW", "UPDATE_SWFW"),
        (40, "RESTART_APP", "CONTACT_SUPPORT"),
    ],
)
def test_each_xid_of_the_table_carries_the_catalogs_resolutions(code, immediate, investigatory):
    xid = taxonomy.xid_info(code)
    assert (xid.immediate, xid.investigatory) == (immediate, investigatory)
    assert xid.mnemonic == xid_catalog.catalog_load()[code].mnemonic


def test_the_table_keeps_its_causes_and_adds_every_catalog_code():
    catalog = xid_catalog.catalog_load()
    assert catalog.keys() <= taxonomy.XIDS.keys()
    # Causes are kept where the catalog agrees; its resolution sets the action.
    assert (taxonomy.XIDS[79].cause, taxonomy.XIDS[79].page) == ("gpu_off_bus", True)
    assert taxonomy.XIDS[79].action == taxonomy.Action.REBOOT
    assert taxonomy.XIDS[94].action == taxonomy.Action.RESTART
    assert taxonomy.XIDS[61].cause == "gpu_firmware" and taxonomy.XIDS[61].immediate is None
    # A RESTART_APP code with no mapping is the job's own fault, named as the catalog names it.
    copy_engine = taxonomy.xid_info(39)
    assert (copy_engine.cause, copy_engine.tier) == ("cuda_fault", "cuda")
    assert copy_engine.meaning == "Copy Engine Exception"


def test_an_xid_the_catalog_does_not_list_is_unknown_and_its_line_is_kept():
    xid = taxonomy.xid_info(231)
    assert (xid.cause, xid.immediate, xid.investigatory) == (None, None, None)
    line = "node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 231, pid=4242, name=python, New fault"
    d = diagnose_text(
        "step 120 loss 2.31\nsrun: error: node-07: task 0: Exited with exit code 1\n",
        kernel_log="node-07 kernel: nvidia 0000:3b:00.0: enabling device\n" + line + "\n",
    )
    assert d.cause == "unknown"
    assert any(e.text == line for e in d.evidence)


# --- Refreshing from NVIDIA's sheet ----------------------------------------------------------

HEADER = [
    "Type (XID)",
    "Code",
    "Mnemonic",
    "Description",
    "Applies to A100",
    "Applies to H100",
    "Applies to B100",
    "Applies to GB200",
    "Resolution Bucket (Immediate Action)",
    "Resolution Bucket (Investigatory Action)",
    "Xid 154 linkage",
    "Trigger Conditions",
]
ROWS = [
    ["XID", 1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", "NO", "NO", "NO", "NO",
     "CONTACT_SUPPORT", "N/A; Unused", "", ""],
    ["XID", 63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "YES", "YES",
     "YES", "YES", "IGNORE", "IGNORE", "CUDA 12.7; GPU driver R565", "Row remapper activity"],
    ["XID", 79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus",
     "YES", "YES", "YES", "YES", "RESTART_BM", "CONTACT_SUPPORT", "", "PCIe link down"],
    ["XID", 175, "NEW_FAULT_OF_A_LATER_DRIVER", "A fault the table has not seen", "NO", "NO",
     "NO", "YES", "RESET_GPU", "CONTACT_SUPPORT", "", ""],
    ["XID", 163, "PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged",
     "NO", "NO", "YES", "YES", "", "", "", "No GPU reset required."],
]  # fmt: skip


def _cell(ref: str, value: object, strings: list[str]) -> str:
    if isinstance(value, int):
        return f'<c r="{ref}"><v>{value}</v></c>'
    if value == "":
        return ""
    if len(strings) % 2:  # half the strings inline, as some writers do
        strings.append(str(value))
        return f'<c r="{ref}" t="s"><v>{len(strings) - 1}</v></c>'
    strings.append("")
    return f'<c r="{ref}" t="inlineStr"><is><t>{escape(str(value))}</t></is></c>'


def write_xlsx(path: Path, rows: list[list[object]]) -> Path:
    """A workbook shaped as NVIDIA's: a notes sheet first, then "Xids" with a title row above
    the header; codes as numbers, text as shared or inline strings."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    strings: list[str] = []
    body = []
    for r, row in enumerate([["Xid Catalog Reference"], *rows], start=1):
        cells = "".join(_cell(f"{chr(65 + i)}{r}", v, strings) for i, v in enumerate(row))
        body.append(f'<row r="{r}">{cells}</row>')
    sst = "".join(f"<si><t>{escape(s)}</t></si>" for s in strings)
    files = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>',
        "xl/workbook.xml": f'<workbook xmlns="{main}" xmlns:r="{rel}"><sheets>'
        '<sheet name="Read Me" sheetId="1" r:id="rId1"/><sheet name="Xids" sheetId="2" r:id="rId2"/>'
        "</sheets></workbook>",
        "xl/_rels/workbook.xml.rels": '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="worksheets/sheet1.xml"/>'
        '<Relationship Id="rId2" Target="worksheets/sheet2.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": f'<worksheet xmlns="{main}"><sheetData><row r="1">'
        '<c r="A1" t="inlineStr"><is><t>Code</t></is></c></row></sheetData></worksheet>',
        "xl/worksheets/sheet2.xml": f'<worksheet xmlns="{main}"><sheetData>{"".join(body)}</sheetData></worksheet>',
        "xl/sharedStrings.xml": f'<sst xmlns="{main}">{sst}</sst>',
    }  # fmt: skip
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


@pytest.fixture
def target(tmp_path):
    """A copy of the shipped catalog and its source note, for the command to rewrite."""
    catalog, source = tmp_path / "xid_catalog.csv", tmp_path / "xid_catalog.source.json"
    catalog.write_bytes(xid_catalog.CATALOG_PATH.read_bytes())
    source.write_bytes(xid_catalog.SOURCE_PATH.read_bytes())
    return catalog, source


def _refresh(sheet: Path, catalog: Path, source: Path, *extra: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(
        "xid_catalog_refresh", str(sheet), "--catalog", str(catalog), "--source", str(source),
        *extra, stdout=out,
    )  # fmt: skip
    return out.getvalue()


def test_refresh_from_the_sheet_rewrites_the_catalog_with_the_xids_in_use(tmp_path, target):
    catalog, source = target
    sheet = write_xlsx(tmp_path / "Xid-Catalog.xlsx", [HEADER, *ROWS])
    out = _refresh(sheet, catalog, source, "--date", "2027-03-01")
    rows = xid_catalog.catalog_load(catalog)
    assert sorted(rows) == [63, 79, 163, 175]  # Xid 1 (Unused, no product) is left out
    assert rows[175].immediate == "RESET_GPU" and rows[175].applies_to == ("GB200",)
    assert rows[79].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert rows[79].notes == ""  # trigger text only where there is no bucket
    assert (rows[163].immediate, rows[163].notes) == ("", "No GPU reset required.")
    note = json.loads(source.read_text())
    assert note["catalog_date"] == "2027-03-01" and note["url"] == xid_catalog.CATALOG_URL
    assert "4 Xids in use" in out and "added 175" in out and "removed 8, 11" in out


def test_refresh_reads_the_sheet_saved_as_csv(tmp_path, target):
    catalog, source = target
    sheet = tmp_path / "xids.csv"
    sheet.write_text("\n".join(",".join(f'"{v}"' for v in r) for r in [HEADER, *ROWS]) + "\n")
    _refresh(sheet, catalog, source)
    assert sorted(xid_catalog.catalog_load(catalog)) == [63, 79, 163, 175]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([[h for h in HEADER if "Immediate" not in h]], "'Resolution Bucket (Immediate Action)'"),
        ([HEADER, ["XID", "7x", "M", "D", "YES", "YES", "YES", "YES", "IGNORE", "", "", ""]],
         "row 3: Code '7x' is not a positive integer"),
        ([HEADER, ROWS[1], ROWS[1]], "row 4: Xid 63 is listed twice (row 3)"),
        ([HEADER, ROWS[0]], "no Xid in use"),
        ([["Type", "Mnemonic"]], "no header row with a 'Code' column"),
    ],
)  # fmt: skip
def test_a_bad_sheet_is_refused_by_name_and_the_catalog_is_left_as_it_was(
    tmp_path, target, rows, message
):
    catalog, source = target
    before = (catalog.read_bytes(), source.read_bytes())
    sheet = write_xlsx(tmp_path / "bad.xlsx", rows)
    with pytest.raises(CommandError) as e:
        _refresh(sheet, catalog, source)
    assert message in str(e.value)
    assert (catalog.read_bytes(), source.read_bytes()) == before


def test_a_file_that_is_no_workbook_is_refused(tmp_path, target):
    catalog, source = target
    before = catalog.read_bytes()
    for name, data in (("sheet.xlsx", b"PK not a zip"), ("sheet.ods", b"")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CommandError, match=r"not a readable \.xlsx|expected NVIDIA's sheet"):
            _refresh(tmp_path / name, catalog, source)
    with pytest.raises(CommandError, match="no such file"):
        _refresh(tmp_path / "missing.xlsx", catalog, source)
    assert catalog.read_bytes() == before


def test_manage_py_refuses_a_bad_sheet_with_one_line_and_no_database(tmp_path, target):
    catalog, source = target
    before = catalog.read_bytes()
    sheet = tmp_path / "xids.csv"
    sheet.write_text("Code,Mnemonic,Description\n48,ROBUST_CHANNEL_GPU_ECC_DBE,DBE\n")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "VIGIL_DATA_DIR": str(tmp_path / "data"),
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "xid_catalog_refresh", str(sheet),
         "--catalog", str(catalog), "--source", str(source)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "missing column(s)" in lines[0] and "Immediate" in lines[0]
    assert catalog.read_bytes() == before
    assert not (tmp_path / "data" / "pg").exists()  # no embedded PostgreSQL was started
