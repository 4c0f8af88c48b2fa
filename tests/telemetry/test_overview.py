"""The fleet overview tells an operator which nodes are out of service and which idle GPUs a job
holds: each node's row is named with its state, and each GPU carries the job holding it."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from tests.telemetry.helpers import gpus_hold, node_a01_drain


def test_overview_names_each_node_with_its_state_and_each_gpus_job(operator_client, small_fleet):
    # gpu-a-01: GPUs 0, 1 busy, 4, 5 idle (5 %, 0 %), 6, 7 busy; job 77 holds 0, 1, 4, 5; job 76
    # held 6 and 7 until an hour ago.
    gpus_hold(small_fleet, "76", [6, 7], ended=True)
    gpus_hold(small_fleet, "77", [0, 1, 4, 5])
    node_a01_drain(small_fleet)

    data = operator_client.get(reverse("pages_api:overview_json")).json()
    alpha = next(c for c in data["clusters"] if c["name"] == "alpha")
    grid = alpha["grid"]
    assert grid["hosts"] == ["gpu-a-01", "gpu-a-02"]
    # Drained by the scheduler while job 77 runs on it: draining, as Slurm says; gpu-a-02 last
    # reported 15 minutes ago.
    assert grid["states"] == ["draining", "stale"]
    assert grid["jobs"] == [["77", "train-77", "alice"]]
    assert grid["held"][:8] == [0, 0, None, None, 0, 0, None, None]
    assert grid["held"][8:] == [None] * 8
    # GPUs 4 and 5 are idle and held: the page can tell them from a free idle GPU.
    held_idle = [i for i in range(16) if grid["status"][i] == "i" and grid["held"][i] is not None]
    assert held_idle == [4, 5]
    beta = next(c for c in data["clusters"] if c["name"] == "beta")
    assert beta["grid"]["states"] == [""] and beta["grid"]["held"] == [None] * 4

    # The page's first payload says the same, and its legend explains the colour.
    page = operator_client.get(reverse("pages:overview"))
    assert page.context["payload"]["clusters"][0]["grid"]["states"] == ["draining", "stale"]
    assert "Held idle" in page.content.decode()


def test_overview_json_for_scripts_names_node_state_and_job(operator_client, small_fleet):
    gpus_hold(small_fleet, "77", [0, 4])
    node_a01_drain(small_fleet)
    data = operator_client.get(reverse("pages_api:overview_json"), {"gpus": "1"}).json()
    by_gpu = {(g["node"], g["index"]): g for g in data["gpus"]}
    assert by_gpu[("gpu-a-01", 0)]["job"] == "77" and by_gpu[("gpu-a-01", 4)]["job"] == "77"
    assert by_gpu[("gpu-a-01", 1)]["job"] is None
    assert by_gpu[("gpu-a-01", 0)]["node_state"] == "draining"  # job 77 still runs there
    assert by_gpu[("gpu-b-01", 0)]["node_state"] == "up"


def test_overview_of_a_large_cluster_counts_held_idle_gpus_per_node(small_fleet):
    """At one cell per node, a node's state and its idle GPUs a job holds are in its cell."""
    from webapp.jobs.selectors import gpu_holders
    from webapp.pages.overview import overview_payload
    from webapp.telemetry.selectors import clusters_overview

    gpus_hold(small_fleet, "77", [0, 4, 5])
    node_a01_drain(small_fleet)
    summaries, gpus = clusters_overview()
    now = timezone.now()
    data = overview_payload(
        summaries,
        gpus,
        holders=gpu_holders(now),
        now=now,
        node_url=lambda i: f"/nodes/{i}/",
        busy_util_pct=50,
        stale_after_s=60,
        gpu_cells_max=4,
    )
    grid = next(c for c in data["clusters"] if c["name"] == "alpha")["grid"]
    assert grid["level"] == "node"
    assert grid["states"] == ["draining", "stale"]
    # gpu-a-01 at a 50 % busy line: GPUs 4 and 5 idle and held; 0 is held but busy.
    assert grid["held_idle"] == [2, 0]
    assert "drained" in data["out_of_service"]


def test_a_job_name_in_the_overview_hover_is_text_not_markup(operator_client, small_fleet):
    """Plotly reads <a href> and <b> in hover text: a job named so must not draw a link."""
    job = gpus_hold(small_fleet, "78", [0])
    job.name = '<a href="https://evil.example">click</a>'
    job.user = "<b>mallory</b>"
    job.save()
    data = operator_client.get(reverse("pages_api:overview_json")).json()
    alpha = next(c for c in data["clusters"] if c["name"] == "alpha")
    [(_, name, user)] = alpha["grid"]["jobs"]
    assert "<a" not in name and "&lt;a href" in name
    assert user == "&lt;b&gt;mallory&lt;/b&gt;"
