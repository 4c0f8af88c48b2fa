"""Tables declared once: no view writes a CSV header by hand, every CSV a table declaration
serves starts with exactly the declaration's header, and a page table's header row is the
same declaration's, naming nothing its CSV lacks."""

from __future__ import annotations

import ast
import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.energy import rig as energy_rig
from webapp.alerts import tables as alerts_tables
from webapp.core.tables import Table, tables_of
from webapp.energy import tables as energy_tables
from webapp.energy.services import energy_rollups_refresh
from webapp.evaluation import tables as evaluation_tables
from webapp.evaluation.estimates import default_suite
from webapp.evaluation.models import EvaluationJob, EvaluationRun
from webapp.evaluation.planner import Hardware, plans_compare
from webapp.failures import tables as failures_tables
from webapp.failures.choices import FailureKind
from webapp.failures.models import FailureEvent
from webapp.fleet.models import Cluster, Gpu, Node
from webapp.jobs import tables as jobs_tables
from webapp.jobs.models import Job
from webapp.recovery import tables as recovery_tables
from webapp.recovery.models import RecoveryAction, RecoveryPlan
from webapp.telemetry import tables as telemetry_tables

ROOT = Path(__file__).resolve().parent.parent
WEBAPP = ROOT / "webapp"

# Apps whose views take every CSV from a table declaration: all of those with a CSV.
DECLARED = ("telemetry", "jobs", "failures", "energy", "alerts", "recovery", "evaluation")

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


def test_no_view_writes_a_csv_header():
    found = [hit for path in _views() for hit in hand_written_headers(path)]
    assert found == [], "CSV headers written by hand; declare a Table in the app's tables.py"


def test_every_app_with_a_csv_declares_its_tables():
    with_csv = {
        path.relative_to(WEBAPP).parts[0]
        for path in _views()
        if re.search(r"\.csv_(response|stream)\(", path.read_text())
    }
    assert with_csv <= set(DECLARED)


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
    action: RecoveryAction
    run: EvaluationRun


@pytest.fixture
def world(db) -> World:
    cluster = Cluster.objects.create(name="alpha")
    node = Node.objects.create(cluster=cluster, hostname="a01", token_hash="x")
    gpu = Gpu.objects.create(node=node, index=0, uuid="GPU-alpha-a01-0", model="H100")
    now = timezone.now()
    failure = FailureEvent.objects.create(
        cluster=cluster, kind=FailureKind.GPU_ERROR, node=node, occurred_at=now, detected_at=now
    )
    plan = RecoveryPlan.objects.create(
        cluster=cluster, failure=failure, node=node, mode="approve", executor="simulated"
    )
    action = RecoveryAction.objects.create(
        plan=plan, cluster=cluster, kind="drain", status="awaiting_approval", mode="approve",
        executor="simulated", node=node, host=node.hostname,
        commands=[["scontrol", "update", "nodename=a01", "state=drain"]],
    )  # fmt: skip
    prediction = plans_compare(default_suite(2), Hardware(1, 8, model_size_gb=14))
    run = EvaluationRun.objects.create(
        cluster=cluster, model_path="/ckpt/m", model_size_gb=14.0, datasets=["humaneval"],
        nodes=1, gpus_per_node=8, requested_by="op", prediction=prediction,
        predicted_makespan_s=prediction["decoupled"]["makespan_s"], node_names=["a01"],
    )  # fmt: skip
    EvaluationJob.objects.create(
        run=run, key="g0", order=0, kind="gpu", node_index=0, gpu_index=0,
        datasets=[["humaneval", 0, 1]], planned_start_s=0.0, planned_end_s=60.0,
    )  # fmt: skip
    return World(cluster, node, gpu, failure, action, run)


def _recovery(w: World, name: str) -> str:
    return f"{reverse(f'recovery_api:{name}_csv')}?cluster={w.cluster.name}"


def _job_page(w: World, name: str) -> str:
    job = Job.objects.create(cluster=w.cluster, scheduler_id="j1", state="running")
    return reverse("jobs_api:detail_csv", args=[job.id, name])


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
    "jobs.JOB_TIMELINE": lambda w: _job_page(w, "timeline"),
    "jobs.JOB_ALLOCATIONS": lambda w: _job_page(w, "allocations"),
    "jobs.JOB_OUTLIERS": lambda w: _job_page(w, "outliers"),
    "jobs.JOB_NODE_ENERGY": lambda w: _job_page(w, "node-energy"),
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
        f"alerts.{table}": lambda w, name=name: reverse(f"alerts_api:{name}_csv")
        for table, name in [
            ("ALERTS", "list"),
            ("SILENCES", "silences"),
            ("CHANNELS", "channels"),
            ("SUBSCRIPTIONS", "subscriptions"),
            ("DELIVERIES", "deliveries"),
            ("OUTBOX", "outbox"),
        ]
    },
    **{
        f"recovery.{table}": lambda w, name=name: _recovery(w, name)
        for table, name in [
            ("SUMMARY", "summary"),
            ("OVER_TIME", "over_time"),
            ("PLANS", "plans"),
            ("ACTIONS", "actions"),
            ("NODES", "nodes"),
        ]
    },
    "recovery.STEPS": lambda w: reverse("recovery_api:action_steps_csv", args=[w.action.pk]),
    "recovery.TIMELINE": lambda w: reverse(
        "recovery_api:failure_timeline_csv", args=[w.failure.pk]
    ),
    "evaluation.RUNS": lambda w: reverse("evaluation_api:runs_csv"),
    "evaluation.JOBS": lambda w: reverse("evaluation_api:jobs_csv", args=[w.run.pk]),
    "evaluation.PLANS": lambda w: reverse("evaluation_api:plan_csv", args=[w.run.pk]),
    "evaluation.ESTIMATES": lambda w: reverse("evaluation_api:estimates_csv"),
    "evaluation.PHASES": lambda w: (
        f"{reverse('evaluation_api:characterization_csv')}?cluster={w.cluster.name}"
    ),
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
    "alerts": alerts_tables,
    "recovery": recovery_tables,
    "evaluation": evaluation_tables,
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


# --- Each page table's header row is its declaration's ---------------------------------------

# For each page table declared, the page that shows it and the table's id there.
PAGE_OF: dict[str, Callable[[World], tuple[str, str]]] = {
    "alerts.ALERTS": lambda w: (reverse("alerts:list"), "alert-table"),
    "alerts.SILENCES": lambda w: (reverse("alerts:silences"), "silence-table"),
    "alerts.SUBSCRIPTIONS": lambda w: (reverse("alerts:channels"), "subscription-table"),
    "alerts.CHANNELS": lambda w: (reverse("alerts:channels"), "channel-table"),
    "alerts.DELIVERIES": lambda w: (reverse("alerts:deliveries"), "delivery-table"),
    "alerts.OUTBOX": lambda w: (reverse("alerts:outbox"), "outbox-table"),
    "recovery.SUMMARY": lambda w: (_cluster_page("recovery:cluster", w), "phase-table"),
    "recovery.PLANS": lambda w: (_cluster_page("recovery:cluster", w), "plan-table"),
    "recovery.NODES": lambda w: (reverse("recovery:nodes"), "node-table"),
    "recovery.TIMELINE": lambda w: (
        reverse("failures:detail", args=[w.failure.pk]),
        "recovery-timeline",
    ),
    "evaluation.RUNS": lambda w: (_cluster_page("evaluation:page", w), "run-table"),
    "evaluation.JOBS": lambda w: (_cluster_page("evaluation:page", w), "job-table"),
}


def _cluster_page(name: str, w: World) -> str:
    return f"{reverse(name)}?cluster={w.cluster.name}"


def _page_header(html: str, table_id: str) -> list[str]:
    table = re.search(rf'<table[^>]*id="{table_id}"[^>]*>(.*?)</table>', html, re.S)
    assert table, f"no table {table_id} on the page"
    head = re.search(r"<thead>(.*?)</thead>", table.group(1), re.S)
    assert head, f"table {table_id} has no header row"
    return [re.sub(r"<[^>]+>", "", th).strip() for th in re.findall(r"<th[^>]*>(.*?)</th>", head.group(1), re.S)]  # fmt: skip


def test_every_page_table_of_the_newly_declared_apps_has_its_page_checked():
    apps = ("alerts", "recovery", "evaluation")
    with_page = [
        name for name, table in _declared().items() if name.startswith(apps) and table.headers()
    ]
    assert sorted(with_page) == sorted(PAGE_OF)


@pytest.mark.parametrize("name", sorted(PAGE_OF))
def test_the_page_header_is_the_declaration_and_the_csv_has_its_columns(
    operator_client, world, name
):
    table = _declared()[name]
    url, table_id = PAGE_OF[name](world)
    response = operator_client.get(url)
    assert response.status_code == 200, response.content[:300]
    assert _page_header(response.content.decode(), table_id) == [
        str(c.label) for c in table.headers()
    ]
    # What the page shows, the CSV carries (buttons and links apart).
    csv_header = _header(operator_client.get(CSV_OF[name](world)))
    shown = [c.key for c in table.headers() if not c.html_only]
    assert set(shown) <= set(csv_header)
