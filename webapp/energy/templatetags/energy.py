"""Template tags of the energy app: a job's facility energy and CO2e for the job page, next
to the GPU energy it already shows (webapp/jobs views stay as they are)."""

from __future__ import annotations

from django import template

from webapp.energy.selectors import JobEnergy, job_energy

register = template.Library()


@register.simple_tag
def job_facility_energy(job) -> JobEnergy | None:
    """The job's share of its hours' facility energy and CO2e (None before the hourly rollup
    has accounted it)."""
    return job_energy(job)
