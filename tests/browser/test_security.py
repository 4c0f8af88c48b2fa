"""The Content-Security-Policy in a real Chromium: the pages work under it, nothing violates it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

# Every violation the browser reports, recorded before any page script runs.
_RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def test_overview_draws_its_charts_with_no_csp_violation(
    page, live_server, live_fleet, operator_login, page_log
):
    page.add_init_script(_RECORD_VIOLATIONS)
    operator_login("/")
    response = page.reload()
    assert "default-src 'self'" in response.headers["content-security-policy"]
    # Plotly drew both heatmaps (its styles and images are what a strict policy could block).
    page.wait_for_function(
        "document.querySelectorAll('.heatmap g.hm image').length >= 2", timeout=15_000
    )
    page.wait_for_load_state("networkidle")

    assert page.evaluate("window.__cspViolations") == []
    assert not [e for e in page_log.errors if "Content Security Policy" in e]
    assert page_log.errors == []


def test_the_policy_blocks_an_inline_script(page, live_server, page_log):
    """The policy is in force, not only sent: an injected inline script does not run."""
    page.add_init_script(_RECORD_VIOLATIONS)
    page.goto(f"{live_server.url}/login/")
    page.evaluate(
        """() => { const s = document.createElement('script');
                   s.textContent = 'window.__injected = true;';
                   document.body.appendChild(s); }"""
    )
    assert page.evaluate("window.__injected === undefined")
    assert any(v.startswith("script-src") for v in page.evaluate("window.__cspViolations"))
