"""`make demo` runs with DEBUG on; a person trying it who types an address that matches no
page, or asks for something that does not exist, gets Vigil's branded 404 page (as outside
debug), not Django's yellow technical page listing every URL pattern."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, operator_client):
    settings.DEBUG = True  # as `make demo` runs (VIGIL_DEBUG=true)
    return operator_client


def _branded(response) -> str:
    html = response.content.decode()
    assert response.status_code == 404
    assert 'id="not-found"' in html and "<title>Not found" in html, html[:300]
    assert "URLconf" not in html and "Page not found" not in html
    return html


def test_an_address_that_matches_no_page_is_the_branded_page(demo):
    html = _branded(demo.get("/no-such-page/"))
    assert "There is no page at this address." in html
    _branded(demo.get("/api/v1/no-such-export.csv"))


def test_something_that_does_not_exist_is_the_branded_page(demo):
    _branded(demo.get("/clusters/no-such-cluster/nodes/"))  # Http404 from the view


def test_a_page_s_own_404_and_the_missing_slash_redirect_are_kept(demo):
    # The job page's own 404 says what was not found and what was likely meant.
    assert "Vigil has no job 424242" in _branded(demo.get("/jobs/424242/"))
    # An address missing its slash is still redirected to the page (CommonMiddleware).
    response = demo.get("/recovery")
    assert (response.status_code, response["Location"]) == (301, "/recovery/")
