"""A blamed GPU is named one way everywhere, by its index and bus id, and links to its page:
on the failure page, in the job page's timeline and in the alert email."""

from __future__ import annotations

from django.urls import reverse

from tests.alerts.conftest import default_rules
from tests.jobs.incident import incident_job
from webapp.alerts import evaluate
from webapp.alerts.emails import alert_context
from webapp.core.templatetags.vigil import gpu_name


def test_gpu_name():
    assert gpu_name(3, "0000:3B:00.0") == "GPU 3 (0000:3B:00.0)"
    assert gpu_name(3) == "GPU 3" and gpu_name(None) == "GPU ?"


def test_a_blamed_gpu_reads_and_links_the_same_on_every_page(operator_client, db):
    default_rules()
    incident = incident_job()
    gpu = incident.blamed_gpu
    link = f'<a class="gpu-link" href="{reverse("telemetry:gpu", args=[gpu.pk])}">'
    name = "GPU 2 (0000:1A:00.0)"
    failure_page = operator_client.get(f"/failures/{incident.job_failure.pk}/").content.decode()
    assert f"{link}{name}</a>" in failure_page  # Blamed
    gpu_page = operator_client.get(f"/failures/{incident.gpu_failure.pk}/").content.decode()
    assert f"root Xid 79 on {link}{name}</a>" in gpu_page
    job_page = operator_client.get(f"/jobs/{incident.job.id}/").content.decode()
    assert f"on gpu-i-01 {name}" in job_page
    [alert] = evaluate.failure_alerts(incident.gpu_failure.pk)
    item = alert_context(alert, show_logs=False)
    assert item["gpu"] == name and item["gpu_url"].endswith(f"/gpus/{gpu.pk}/")
    assert item["failure"]["blamed_gpu"] == name
