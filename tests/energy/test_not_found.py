"""A month with no energy accounted (a cluster before its first hourly rollup, a month before
its first samples): the report and its PDF answer 404 inside Vigil's page, saying why and
linking the cluster's energy page, not a line of bare text."""

from __future__ import annotations

from django.urls import reverse

from webapp.fleet.services import node_token_issue


def test_report_of_a_month_with_no_energy_says_why_inside_the_page(operator_client, db):
    node_token_issue("fresh", "gpu-f-01")  # a cluster that has not reported a full hour yet
    for name in ("energy:report", "energy:report_pdf"):
        for query in ({"cluster": "fresh"}, {"cluster": "fresh", "month": "2001-01"}):
            response = operator_client.get(reverse(name), query)
            assert response.status_code == 404, (name, query)
            assert response["Content-Type"].startswith("text/html"), (name, query)
            html = response.content.decode()
            assert "<h1>Not found</h1>" in html and 'class="brand"' in html
            assert "no energy data for cluster fresh" in html
            assert "hourly rollup" in html  # why: energy is accounted per ended hour
            energy_page = reverse("energy:cluster") + "?cluster=fresh&amp;month="
            assert energy_page in html, (name, query)
