"""Tables declared once: no view writes a CSV header by hand, and every CSV a
table declaration serves starts with exactly the declaration's header."""

from __future__ import annotations

import ast
import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.energy import rig as energy_rig
from webapp.core.tables import Table, tables_of
from webapp.energy import tables as energy_tables
from webapp.energy.services import energy_rollups_refresh
from webapp.failures import tables as failures_tables
from webapp.failures.choices import FailureKind
from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs import tables as jobs_tables
from webapp.telemetry import tables as telemetry_tables

ROOT = Path(__file__).resolve().parent.parent
WEBAPP = ROOT / "webapp"

# Apps whose views take every CSV from a table declaration.
DECLARED = ("telemetry", "jobs", "failures", "energy")

# Known debt: views of apps not yet moved to declarations, with how many hand-written CSV
# headers each still has. A count may only go down; a file not listed may have none.
DEBT = {
    "webapp/alerts/views.py": 6,
    "webapp/evaluation/views.py": 5,
    "webapp/recovery/views.py": 9,
}

_CSV_FUNCTIONS = {"csv_response", "csv_stream"}


def _is_string_list(node: ast.AST) -> bool:
    return isinstance(node, ast.List | ast.Tuple) and any(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    )


def hand_written_headers(path: Path, root: Path = ROOT) -> list[str]:
    """Where a view hands a CSV header of its own making to the CSV writers: any call of
    core.exports' csv_response / csv_stream itself (their second argument is the header;
    a Table's methods of the same names pass the declaration's), and any
    `.writerow([...strings...])`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        bare = isinstance(func, ast.Name) and func.id in _CSV_FUNCTIONS
        via_module = (
            isinstance(func, ast.Attribute)
            and func.attr in _CSV_FUNCTIONS
            and isinstance(func.value, ast.Name)
            and func.value.id == "exports"
        )
        writerow = (
            isinstance(func, ast.Attribute)
            and func.attr in {"writerow", "writeheader"}
            and bool(node.args)
            and _is_string_list(node.args[0])
        )
        if bare or via_module or writerow:
            found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def _views() -> list[Path]:
    return sorted(WEBAPP.glob("*/views.py")) + sorted(WEBAPP.glob("*/views/*.py"))


def test_no_view_of_the_declared_apps_writes_a_csv_header():
    found = [
        hit
        for app in DECLARED
        for path in _views()
        if path.is_relative_to(WEBAPP / app)
        for hit in hand_written_headers(path)
    ]
    assert found == [], "CSV headers written by hand; declare a Table in the app's tables.py"


def test_hand_written_csv_headers_elsewhere_only_shrink():
    counts = {}
    for path in _views():
        if any(path.is_relative_to(WEBAPP / app) for app in DECLARED):
            continue
        hits = hand_written_headers(path)
        if hits:
            counts[str(path.relative_to(ROOT))] = len(hits)
    grown = {p: n for p, n in counts.items() if n > DEBT.get(p, 0)}
    assert grown == {}, f"new hand-written CSV headers (declare a Table instead): {grown}"


def test_the_scan_sees_a_header_written_by_hand(tmp_path):
    view = tmp_path / "views.py"
    view.write_text(
        "import csv\n"
        "from webapp.core import exports\n"
        "from webapp.core.exports import csv_response\n"
        "def a(r):\n    return csv_response('a.csv', ['x', 'y'], [])\n"
        "def b(r):\n    return exports.csv_stream('b.csv', HEADER, [])\n"
        "def c(r, out):\n    csv.writer(out).writerow(('x', 'y'))\n"
        "def d(r):\n    return TABLE.csv_response('d.csv', [])\n"
    )
    assert hand_written_headers(view, tmp_path) == ["views.py:5", "views.py:7", "views.py:9"]


# --- Each declared table's CSV starts with its declaration ------------------------------------


@dataclass
class World:
    cluster: Cluster
    node: Node
    gpu: Gpu
    failure: FailureEvent


@pytest.fixture
def world(db) -> World:
    cluster = Cluster.objects.create(name="alpha")
    node = Node.objects.create(cluster=cluster, hostname="a01", token_hash="x")
    gpu = Gpu.objects.create(node=node, index=0, uuid="GPU-alpha-a01-0", model="H100")
    now = timezone.now()
    failure = FailureEvent.objects.create(
        cluster=cluster, kind=FailureKind.GPU_ERROR, node=node, occurred_at=now, detected_at=now
    )
    return World(cluster, node, gpu, failure)


def _characterization(w: World, name: str) -> str:
    url = reverse("jobs_api:characterization_csv", args=[name])
    return f"{url}?cluster={w.cluster.name}"


# For each declared table with CSV columns, the address of a CSV it serves.
CSV_OF: dict[str, Callable[[World], str]] = {
    "telemetry.CLUSTERS": lambda w: reverse("telemetry_api:overview_csv"),
    "telemetry.NODE_GPUS": lambda w: reverse("telemetry_api:node_csv", args=[w.node.id]),
    "telemetry.GPU_SERIES": lambda w: reverse("telemetry_api:gpu_csv", args=[w.gpu.id]),
    "telemetry.NODES": lambda w: reverse("telemetry_api:nodes_csv", args=[w.cluster.name]),
    "jobs.JOBS": lambda w: reverse("jobs_api:list_csv"),
    "jobs.WASTED": lambda w: reverse("jobs_api:wasted_csv"),
    **{
        f"jobs.{table}": lambda w, name=name: _characterization(w, name)
        for table, name in [
            ("TYPES", "types"),
            ("DURATION_CDF", "duration"),
            ("QUEUE_CDF", "queue"),
            ("GPUS_CDF", "gpus"),
            ("STATES", "states"),
            ("TELEMETRY_CDF", "telemetry"),
            ("SUMMARY", "summary"),
        ]
    },
    "failures.FAILURES": lambda w: reverse("failures_api:timeline_csv"),
    "failures.EVIDENCE": lambda w: reverse("failures_api:detail_evidence_csv", args=[w.failure.pk]),
    "failures.XIDS": lambda w: reverse("failures_api:detail_xids_csv", args=[w.failure.pk]),
    **{
        f"failures.RELIABILITY_{name.upper()}": lambda w, name=name: reverse(
            "failures_api:reliability_csv", args=[name]
        )
        for name in failures_tables.RELIABILITY
        if name != "table3"
    },
}

MODULES = {
    "telemetry": telemetry_tables,
    "jobs": jobs_tables,
    "failures": failures_tables,
    "energy": energy_tables,
}


def _declared() -> dict[str, Table]:
    return {
        f"{app}.{name}": table
        for app, module in MODULES.items()
        for name, table in tables_of(vars(module)).items()
    }


# Energy's tables need a month with energy in it: the energy tests' rig, by the slug in the
# CSV's address.
ENERGY_CSV = {
    "energy.DAYS": "days",
    "energy.SUMMARY": "summary",
    "energy.LINES": "teams",
    "energy.REPORT": "report",
    "energy.TRENDS": "trends",
}


def test_every_declared_table_has_its_csv_checked():
    assert set(MODULES) == set(DECLARED)
    assert sorted(_declared()) == sorted([*CSV_OF, *ENERGY_CSV])


def _header(response) -> list[str]:
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return next(csv.reader(io.StringIO(body.decode())))


def test_the_energy_csv_headers_are_the_declarations(operator_client, db):
    t0 = energy_rig.start_time()
    energy_rig.build(t0)
    energy_rollups_refresh()
    q = {"cluster": energy_rig.CLUSTER, "month": f"{t0:%Y-%m}"}
    declared = _declared()
    for name, slug in ENERGY_CSV.items():
        response = operator_client.get(reverse("energy_api:csv", args=[slug]), q)
        assert _header(response) == declared[name].csv_header(), name


@pytest.mark.parametrize("name", sorted(CSV_OF))
def test_the_csv_header_is_the_declaration(operator_client, world, name):
    assert _header(operator_client.get(CSV_OF[name](world))) == _declared()[name].csv_header()
