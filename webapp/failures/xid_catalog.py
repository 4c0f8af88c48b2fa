"""NVIDIA's Xid catalog as data: every in-use Xid with its mnemonic, description and the
catalog's two resolutions (docs/xid-catalog.md says where it comes from and how to refresh it).

`data/xid_catalog.csv` holds the rows, `data/xid_catalog.source.json` the catalog's URL and
date. `catalog_load` reads them (taxonomy.XIDS is built from it); `sheet_read` reads NVIDIA's
downloadable sheet (.xlsx, or the same table saved as .csv) and `catalog_write` replaces the data
file with it, as `manage.py xid_catalog_refresh` does. Plain Python, no Django; the .xlsx reader
is the standard library's (zipfile and ElementTree), so a site needs no spreadsheet package.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from xml.etree import ElementTree

DATA_DIR = Path(__file__).resolve().parent / "data"
CATALOG_PATH = DATA_DIR / "xid_catalog.csv"
SOURCE_PATH = DATA_DIR / "xid_catalog.source.json"
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SHEET_URL = "https://docs.nvidia.com/Xid-Catalog.xlsx"

FIELDS = (
    "xid",
    "mnemonic",
    "description",
    "applies_to",
    "immediate_resolution",
    "investigatory_resolution",
    "notes",
)

# The resolution buckets the catalog names (its "Fault Resolution Buckets" sheet). A refreshed
# sheet may bring a new one: it is kept as written, and docs/xid-catalog.md lists these.
RESOLUTIONS = frozenset(
    {
        "RESTART_APP",
        "RESET_GPU",
        "RESTART_BM",
        "RESTART_VM",
        "CONTACT_SUPPORT",
        "CHECK_MECHANICALS",
        "UPDATE_SWFW",
        "CHECK_UVM",
        "IGNORE",
        "WORKFLOW_XID_45",
        "WORKFLOW_XID_48",
        "WORKFLOW_NVLINK_ERR",
        "WORKFLOW_NVLINK5_ERR",
        "XID_154",
    }
)


class XidCatalogError(ValueError):
    """The catalog file or a sheet cannot be read; the message names the file, row and field."""


@dataclass(frozen=True)
class CatalogEntry:
    code: int
    mnemonic: str
    description: str
    applies_to: tuple[str, ...]  # products the catalog marks YES (A100, H100, B100, GB200)
    immediate: str  # "Resolution Bucket (Immediate Action)"; "" where the catalog gives none
    investigatory: str  # "Resolution Bucket (Investigatory Action)"; "" where none
    notes: str = ""  # the catalog's trigger text, kept where it is the only guidance

    def row(self) -> list[str]:
        return [
            str(self.code),
            self.mnemonic,
            self.description,
            " ".join(self.applies_to),
            self.immediate,
            self.investigatory,
            self.notes,
        ]


def catalog_load(path: Path = CATALOG_PATH) -> dict[int, CatalogEntry]:
    """The catalog file's rows by Xid code. Raises XidCatalogError naming the line at fault."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise XidCatalogError(f"{path}: cannot be read ({e.strerror or e})") from e
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != FIELDS:
        raise XidCatalogError(f"{path}: line 1: header must be {','.join(FIELDS)}, got {header}")
    out: dict[int, CatalogEntry] = {}
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(FIELDS):
            raise XidCatalogError(f"{path}: line {line}: {len(row)} fields, expected {len(FIELDS)}")
        code = _code(row[0])
        if code is None:
            raise XidCatalogError(f"{path}: line {line}: xid {row[0]!r} is not a positive integer")
        if code in out:
            raise XidCatalogError(f"{path}: line {line}: xid {code} is listed twice")
        out[code] = CatalogEntry(
            code, row[1], row[2], tuple(row[3].split()), row[4].strip(), row[5].strip(), row[6]
        )
    if not out:
        raise XidCatalogError(f"{path}: no rows")
    return out


def catalog_source(path: Path = SOURCE_PATH) -> dict[str, str]:
    """The catalog's provenance: at least `url` and `catalog_date`."""
    try:
        source = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise XidCatalogError(f"{path}: cannot be read ({e})") from e
    missing = [k for k in ("url", "catalog_date") if not source.get(k)]
    if missing:
        raise XidCatalogError(f"{path}: missing {', '.join(missing)}")
    return source


# --- NVIDIA's sheet --------------------------------------------------------------------------

# Header cells, matched after folding case and spaces; "Applies to <product>" are found apart.
_SHEET_COLUMNS = {
    "code": ("code",),
    "mnemonic": ("mnemonic",),
    "description": ("description",),
    "immediate": ("resolution bucket (immediate action)", "immediate action"),
    "investigatory": ("resolution bucket (investigatory action)", "investigatory action"),
}
_SHEET_TITLES = {
    "code": "Code",
    "mnemonic": "Mnemonic",
    "description": "Description",
    "immediate": "Resolution Bucket (Immediate Action)",
    "investigatory": "Resolution Bucket (Investigatory Action)",
}
_OPTIONAL = {"type": ("type (xid)", "type xid", "type"), "trigger": ("trigger conditions",)}
_APPLIES = re.compile(r"applies to\s+(.+)")
_SHEET_NAMES = ("xids", "xid")  # the catalog's first sheet; other sheets decode 144-150, buckets


def sheet_read(path: Path) -> list[CatalogEntry]:
    """The in-use Xids of NVIDIA's Xid catalog sheet (.xlsx, or its Xids table as .csv).

    In use: marked YES for at least one product ("Applies to ..." columns); without those
    columns, every row not described as "Unused". Raises XidCatalogError naming the problem
    (a missing column, a code that is not a number, a code listed twice, no rows at all).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        rows = _xlsx_rows(path)
    elif suffix == ".csv":
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:
                rows = [list(r) for r in csv.reader(f)]
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise XidCatalogError(f"{path}: cannot be read as CSV ({e})") from e
    else:
        raise XidCatalogError(f"{path}: expected NVIDIA's sheet as .xlsx or .csv, got {suffix!r}")
    return _entries(path, rows)


def _fold(cell: str) -> str:
    return " ".join(cell.split()).lower()


def _entries(path: Path, rows: list[list[str]]) -> list[CatalogEntry]:
    head_at = next(
        (i for i, r in enumerate(rows) if any(_fold(c) == "code" for c in r)),
        None,
    )
    if head_at is None:
        raise XidCatalogError(f"{path}: no header row with a 'Code' column")
    header = [_fold(c) for c in rows[head_at]]
    cols: dict[str, int] = {}
    for key, names in {**_SHEET_COLUMNS, **_OPTIONAL}.items():
        for name in names:
            if name in header:
                cols[key] = header.index(name)
                break
    missing = [_SHEET_TITLES[key] for key in _SHEET_COLUMNS if key not in cols]
    if missing:
        raise XidCatalogError(
            f"{path}: missing column(s) {', '.join(repr(m) for m in missing)} "
            f"(header row {head_at + 1}: {', '.join(c for c in rows[head_at] if c.strip())})"
        )
    applies = [
        (i, m.group(1).strip().upper()) for i, h in enumerate(header) if (m := _APPLIES.match(h))
    ]

    def cell(r: list[str], key: str) -> str:
        i = cols.get(key)
        return " ".join(r[i].split()) if i is not None and i < len(r) else ""

    out: list[CatalogEntry] = []
    seen: dict[int, int] = {}
    for n, r in enumerate(rows[head_at + 1 :], start=head_at + 2):
        raw = cell(r, "code")
        if not raw:
            continue  # blank or trailing rows
        if "type" in cols and cell(r, "type").upper() not in ("", "XID"):
            continue
        code = _code(raw)
        if code is None:
            raise XidCatalogError(f"{path}: row {n}: Code {raw!r} is not a positive integer")
        if code in seen:
            raise XidCatalogError(f"{path}: row {n}: Xid {code} is listed twice (row {seen[code]})")
        seen[code] = n
        products = tuple(p for i, p in applies if i < len(r) and _yes(r[i]))
        description = cell(r, "description")
        if (applies and not products) or (not applies and description.lower() == "unused"):
            continue
        immediate = cell(r, "immediate")
        trigger = cell(r, "trigger")
        out.append(
            CatalogEntry(
                code,
                cell(r, "mnemonic"),
                description,
                products,
                immediate,
                cell(r, "investigatory"),
                trigger if (not immediate or immediate == "XID_154") else "",
            )
        )
    if not out:
        raise XidCatalogError(f"{path}: no Xid in use (no row marked YES for any product)")
    return sorted(out, key=lambda e: e.code)


def _code(raw: str) -> int | None:
    raw = raw.strip()
    if raw.endswith(".0"):  # a spreadsheet number
        raw = raw[:-2]
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _yes(cell: str) -> bool:
    return cell.strip().upper() in ("YES", "Y", "TRUE", "1")


_NS = {
    "m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
    "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships",
    "p": "http://schemas.openxmlformats.org/package/2006/relationships",
}


def _xlsx_rows(path: Path) -> list[list[str]]:
    """The cells of the workbook's Xids sheet (else its first sheet) as rows of strings."""
    try:
        with zipfile.ZipFile(path) as z:
            book = ElementTree.fromstring(z.read("xl/workbook.xml"))
            rels = ElementTree.fromstring(z.read("xl/_rels/workbook.xml.rels"))
            targets = {
                r.get("Id"): r.get("Target", "") for r in rels.findall("p:Relationship", _NS)
            }
            sheets = [
                (s.get("name", ""), targets.get(s.get(f"{{{_NS['r']}}}id"), ""))
                for s in book.findall("m:sheets/m:sheet", _NS)
            ]
            if not sheets:
                raise XidCatalogError(f"{path}: the workbook has no sheet")
            name, target = next(
                (s for s in sheets if s[0].strip().lower() in _SHEET_NAMES), sheets[0]
            )
            target = target.lstrip("/")
            target = target if target.startswith("xl/") else f"xl/{target}"
            shared = []
            if "xl/sharedStrings.xml" in z.namelist():
                sst = ElementTree.fromstring(z.read("xl/sharedStrings.xml"))
                shared = ["".join(t.text or "" for t in si.iter(f"{{{_NS['m']}}}t")) for si in sst]
            sheet = ElementTree.fromstring(z.read(target))
    except (OSError, zipfile.BadZipFile, KeyError, ElementTree.ParseError) as e:
        raise XidCatalogError(f"{path}: not a readable .xlsx workbook ({e})") from e
    rows: list[list[str]] = []
    for row in sheet.iterfind("m:sheetData/m:row", _NS):
        cells: dict[int, str] = {}
        for c in row.iterfind("m:c", _NS):
            col = _column(c.get("r", ""), len(cells))
            kind = c.get("t")
            if kind == "inlineStr":
                value = "".join(t.text or "" for t in c.iter(f"{{{_NS['m']}}}t"))
            else:
                v = c.find("m:v", _NS)
                value = v.text or "" if v is not None else ""
                if kind == "s" and value:
                    value = shared[int(value)] if int(value) < len(shared) else ""
            cells[col] = value
        width = max(cells, default=-1) + 1
        rows.append([cells.get(i, "") for i in range(width)])
    return rows


def _column(ref: str, fallback: int) -> int:
    letters = "".join(ch for ch in ref if ch.isalpha())
    if not letters:
        return fallback
    n = 0
    for ch in letters.upper():
        n = n * 26 + ord(ch) - ord("A") + 1
    return n - 1


def catalog_write(
    entries: list[CatalogEntry],
    path: Path = CATALOG_PATH,
    source_path: Path = SOURCE_PATH,
    *,
    catalog_date: date,
    url: str = CATALOG_URL,
    sheet: str = "",
) -> None:
    """Replace the catalog file and its source note, each in one rename (never half-written)."""
    if not entries:
        raise XidCatalogError("no entries to write")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FIELDS)
    w.writerows(e.row() for e in sorted(entries, key=lambda e: e.code))
    source = {
        "title": 'NVIDIA Xid Catalog (Analyzing Xid Errors with the Xid Catalog), sheet "Xids"',
        "url": url,
        "sheet_url": SHEET_URL,
        "catalog_date": catalog_date.isoformat(),
        "rows": "Every Xid the catalog marks as applying to at least one product (in use).",
        "written_by": f"manage.py xid_catalog_refresh {sheet}".strip(),
    }
    _replace(Path(path), buf.getvalue())
    _replace(Path(source_path), json.dumps(source, indent=2) + "\n")


def _replace(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
