"""deploy/prometheus/ with Debian's prometheus and prometheus-alertmanager: promtool accepts
the shipped config and rules and their unit tests pass, and a real Prometheus with the shipped
scrape config reads a live Vigil's /metrics with the key, a node agent's /metrics, and sends
the shipped rules' alerts to a real Alertmanager."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import yaml

from collectors.backends.base import GPU_POS
from tests.alertmanager import Alertmanager, alertmanager  # noqa: F401 (the fixture)
from tests.helpers import ROOT, envelope, make_batch, wait_for
from tests.prometheus import (  # noqa: F401 (prometheus_dir: a fixture)
    DEPLOY,
    Prometheus,
    deploy_copy,
    free_port,
    prometheus_dir,
    promtool,
)
from webapp.failures.metrics import xid_page_label
from webapp.failures.node_events import node_events_ingest
from webapp.failures.taxonomy import XIDS
from webapp.telemetry.services import samples_ingest

KEY = "a-scrape-key-of-enough-length"
RULES = DEPLOY / "rules" / "vigil.rules.yml"


def _alert(name: str) -> dict:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == name)


def test_promtool_accepts_the_shipped_config_once_the_key_file_is_there(tmp_path):
    deployed = deploy_copy(tmp_path, KEY)
    result = promtool("check", "config", str(deployed / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid prometheus config file syntax" in result.stdout
    # The key is really read from that file: without it the config is refused.
    (deployed / "vigil-metrics.key").unlink()
    result = promtool("check", "config", str(deployed / "prometheus.yml"))
    assert result.returncode == 1
    assert "vigil-metrics.key" in result.stdout + result.stderr


def test_the_shipped_rules_pass_promtool_check_and_their_unit_tests():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = promtool("test", "rules", "vigil.rules.test.yml", cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def _listed(alert: str) -> set[int]:
    return {int(c) for c in re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", _alert(alert)["expr"])}


def test_the_node_xid_rules_page_only_where_the_catalog_says_act_now():
    """Vigil marks each Xid's page label itself; the node rules list the same codes: a
    critical page for the codes whose node is acted on, a warning for those the catalog says
    to ignore once and take to support if they recur (92, 157), never a page."""
    labels = {x.code: xid_page_label(x.code) for x in XIDS.values()}
    assert _listed("VigilNodeCriticalXid") == {c for c, v in labels.items() if v == "true"}
    assert _listed("VigilNodeXidForSupport") == {c for c, v in labels.items() if v == "support"}
    assert {92, 157} <= _listed("VigilNodeXidForSupport")
    assert not {63, 92, 157} & _listed("VigilNodeCriticalXid")
    assert 'page="true"' in _alert("VigilCriticalXid")["expr"]
    assert _alert("VigilCriticalXid")["labels"]["severity"] == "critical"
    assert 'page="support"' in _alert("VigilXidForSupport")["expr"]
    assert _alert("VigilXidForSupport")["labels"]["severity"] == "warning"


def _job(config: dict, name: str) -> dict:
    return next(j for j in config["scrape_configs"] if j["job_name"] == name)


def test_a_real_prometheus_scrapes_vigil_and_a_node_agent_and_alerts_alertmanager(
    live_server,
    committed_node_token,
    settings,
    prometheus_dir,  # noqa: F811
    alertmanager,  # noqa: F811
):
    settings.VIGIL_METRICS_KEY = KEY
    cluster, node, token = committed_node_token
    batch = make_batch(cluster, node, token, gpus=2)
    batch["samples"][1][GPU_POS["power_w"]] = 412.5
    samples_ingest(json.dumps(batch))
    lost = {"ts": time.time() - 5, "kind": "gpu_lost", "source": "counter", "gpu_index": 1}
    events = {**envelope(cluster, node, token), "gpu_events": [lost], "log_windows": []}
    node_events_ingest(json.dumps(events))

    # The shipped config, pointed at this test's Vigil, agent and Alertmanager.
    deployed = deploy_copy(prometheus_dir, KEY)
    config = yaml.safe_load((deployed / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["alerting"]["alertmanagers"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{alertmanager.port}"]}
    ]
    vigil = _job(config, "vigil")
    vigil.update(
        scheme="http",
        scrape_interval="1s",
        scrape_timeout="1s",
        static_configs=[{"targets": [urlsplit(live_server.url).netloc]}],
    )
    without_key = copy.deepcopy(vigil)
    without_key["job_name"] = "vigil-without-key"
    del without_key["authorization"]
    config["scrape_configs"].append(without_key)
    agent_port = free_port()
    (deployed / "targets" / "vigil-nodes.yml").write_text(
        yaml.safe_dump([{"targets": [f"127.0.0.1:{agent_port}"], "labels": {"cluster": "seren"}}])
    )
    agent = subprocess.Popen(
        [
            sys.executable, "-m", "collectors", "--fixture", "h100-sxm5-80gb", "--cluster",
            "seren", "--node", "gpu-h100-001", "--stdout", "--interval", "1",
            "--metrics-port", str(agent_port),
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    prometheus = Prometheus(deployed, config)
    try:
        prometheus.start()

        [power] = wait_for(lambda: prometheus.query('vigil_gpu_power_watts{gpu="1"}'), 60)
        assert float(power["value"][1]) == 412.5  # the value stored
        assert power["metric"]["cluster"] == cluster
        assert power["metric"]["node"] == node
        assert power["metric"]["job"] == "vigil"

        # Scraped without the key, Vigil refuses.
        [up] = wait_for(lambda: prometheus.query('up{job="vigil-without-key"}'), 60)
        assert up["value"][1] == "0"
        [target] = [t for t in prometheus.targets() if t["labels"]["job"] == "vigil-without-key"]
        assert "401" in target["lastError"]

        # The node agent, straight: dcgm-exporter names, the cluster from the target file.
        gpus = wait_for(lambda: prometheus.query('DCGM_FI_DEV_POWER_USAGE{cluster="seren"}'), 60)
        assert len(gpus) == 8
        assert {g["metric"]["Hostname"] for g in gpus} == {"gpu-h100-001"}

        # The shipped rules run: the GPU lost on the node reaches Alertmanager.
        [alert] = wait_for(lambda: alertmanager.alerts(alertname="VigilGpuLost"), 60)
        assert alert["labels"]["node"] == node
        assert alert["labels"]["severity"] == "critical"
        assert alert["status"]["state"] == "active"
    finally:
        prometheus.stop()
        agent.terminate()
        agent.wait(20)


def test_alertmanager_harness_accepts_and_lists_an_alert(alertmanager):  # noqa: F811
    now = datetime.now(UTC)
    status = alertmanager.post_alerts(
        [
            {
                "labels": {"alertname": "VigilGpuLost", "cluster": "seren", "node": "n1"},
                "annotations": {"summary": "A GPU of seren/n1 is lost"},
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(minutes=5)).isoformat(),
            }
        ]
    )
    assert status == 200
    [alert] = wait_for(lambda: alertmanager.alerts(alertname="VigilGpuLost"), 30)
    assert alert["labels"]["node"] == "n1"
    assert alert["annotations"]["summary"] == "A GPU of seren/n1 is lost"
    assert alert["fingerprint"]
    assert alert["status"]["state"] == "active"
    assert alertmanager.alerts(alertname="SomethingElse") == []
