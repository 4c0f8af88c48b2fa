"""The cached reports follow the report inputs that live outside the rollup: a PUE period, a
market factor, an intensity dataset, a cluster's carbon settings or grid zone, a node power
profile saved or deleted (by a service, a command or the admin) makes them stale. And the job
page's energy: the jobs app asks for it (`job_energy_wanted`), energy answers."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save

from webapp.energy import models as m
from webapp.energy.job_energy import JobEnergy, job_energy
from webapp.energy.services import report_inputs_changed
from webapp.fleet.models import Cluster
from webapp.jobs.dispatch import job_energy_wanted

REPORT_INPUTS = (
    m.PuePeriod,
    m.MarketFactorPeriod,
    m.IntensityDataset,
    m.ClusterCarbonSettings,
    m.NodePowerProfile,
    Cluster,
)


def report_inputs_written(sender: type, **kwargs: object) -> None:
    report_inputs_changed()


for _model in REPORT_INPUTS:
    for _signal, _what in ((post_save, "saved"), (post_delete, "deleted")):
        _signal.connect(
            report_inputs_written,
            sender=_model,
            dispatch_uid=f"energy.report_inputs.{_model._meta.label}.{_what}",
        )


def job_energy_answer(sender: type, *, job, allocations, now, **kwargs: object) -> JobEnergy:
    """The job page's energy (jobs asks through its dispatch; it does not import energy)."""
    return job_energy(job, allocations, now=now)


job_energy_wanted.connect(job_energy_answer, dispatch_uid="energy.job_energy")
