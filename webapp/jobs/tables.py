"""The jobs pages' tables, declared once for the page's header and the CSV
(`webapp/core/tables.py`)."""

from __future__ import annotations

from webapp.core.tables import Column, Table
from webapp.core.units import iso_utc
from webapp.jobs.choices import JobState
from webapp.jobs.data.reference import summary_columns


def _own_exit_code(job) -> int | None:
    """The job's exit code once it has ended; none while it waits or runs."""
    return None if job.state in (JobState.PENDING, JobState.RUNNING) else job.exit_code


def _previous_run_exit_code(job) -> int | None:
    """A requeued job waiting to run again keeps its last run's code until it starts (the
    scheduler watcher clears it then): that run's, not the job's own."""
    return job.exit_code if job.state == JobState.PENDING else None


# The job list (`jobs/list.html`), rows Job.
JOBS = Table(
    Column("cluster", "Cluster", "cluster.name"),
    Column("scheduler_id", "Job"),
    Column("name", "Name"),
    Column("user", "User"),
    Column("account", accessor="team", csv_only=True),  # the scheduler's account
    Column("project", csv_only=True),
    Column("type", "Type", "job_type"),
    Column("state", "State"),
    # Two columns, not one: a script counting failures by exit code must not count a job
    # still waiting to run, and the code its last run died with stays readable.
    Column("exit_code", accessor=_own_exit_code, csv_only=True),
    Column("previous_run_exit_code", accessor=_previous_run_exit_code, csv_only=True),
    Column("submit_utc", "Submitted (UTC)", lambda j: iso_utc(j.submit_at)),
    Column("start_utc", accessor=lambda j: iso_utc(j.start_at), csv_only=True),
    Column("end_utc", accessor=lambda j: iso_utc(j.end_at), csv_only=True),
    Column("queue_s", "Queued", num=True),
    Column("duration_s", "Elapsed", num=True),
    Column("gpus", "GPUs", "gpus_requested", num=True),
    Column("gpu_time_s", csv_only=True),
)

# Idle allocated GPUs (`jobs/wasted.html`), rows WastedGpus; the page's "Job" cell carries
# the job's name beside its id and its "Idle GPUs" the indices beside the count.
WASTED = Table(
    Column("cluster", "Cluster", "job.cluster.name"),
    Column("scheduler_id", "Job", "job.scheduler_id"),
    Column("job_name", accessor="job.name", csv_only=True),
    Column("user", "User", "job.user"),
    Column("team", "Team", "job.team_name"),
    Column("account", accessor="job.team", csv_only=True),
    Column("node", "Node", "hostname"),
    Column("idle_gpu_indices", accessor=lambda w: " ".join(str(i) for i in w.gpus), csv_only=True),
    Column("idle_gpus", "Idle GPUs", lambda w: len(w.gpus)),
    Column("idle_gpu_hours", "Idle GPU-hours", lambda w: round(w.idle_gpu_hours, 3), num=True),
    Column("idle_since_utc", "Idle since (UTC)", lambda w: w.idle_since.isoformat()),
    Column("last_sample_utc", "Last sample", lambda w: w.last_sample.isoformat()),
)

# Per job type (`jobs/characterization.html`), rows TypeStats; the page folds the medians
# and means into one cell each and shows GPU time in hours.
TYPES = Table(
    Column("job_type", "Type"),
    Column("jobs", csv_only=True),
    Column("gpu_jobs", "GPU jobs", num=True),
    Column("gpu_time_s", csv_only=True),
    Column("gpu_hours", "GPU-h", html_only=True, num=True),
    Column("share_of_gpu_jobs", accessor="count_share", csv_only=True),
    Column("share_of_gpu_time", accessor="gpu_time_share", csv_only=True),
    Column("duration", "Duration median / mean", html_only=True, num=True),
    Column("duration_median_s", csv_only=True),
    Column("duration_mean_s", csv_only=True),
    Column("queue", "Queue median / mean", html_only=True, num=True),
    Column("queue_median_s", csv_only=True),
    Column("queue_mean_s", csv_only=True),
    Column("gpus", "GPUs mean / max", html_only=True, num=True),
    Column("gpus_mean", csv_only=True),
    Column("gpus_median", csv_only=True),
    Column("gpus_max", csv_only=True),
)


def _cdf_table(x_key: str) -> Table:
    """A CDF per job type, rows (job_type, x, share) tuples."""
    return Table(
        Column("job_type", accessor=lambda r: r[0]),
        Column(x_key, accessor=lambda r: r[1]),
        Column("share_of_gpu_jobs", accessor=lambda r: r[2]),
    )


# The CDF figures' data (CSV only: the page draws them).
DURATION_CDF = _cdf_table("duration_below_s")
QUEUE_CDF = _cdf_table("queue_below_s")
GPUS_CDF = _cdf_table("gpus_at_most")

# Final states (CSV only: the page draws them), rows StateStats.
STATES = Table(
    Column("final_state", accessor="group"),
    Column("gpu_jobs"),
    Column("gpu_time_s"),
    Column("share_of_gpu_jobs", accessor="count_share"),
    Column("share_of_gpu_time", accessor="gpu_time_share"),
)

# The telemetry CDFs, this site's beside the paper's (CSV only), rows (metric, cluster,
# source, value, cdf_percent) tuples.
TELEMETRY_CDF = Table(
    *(
        Column(key, accessor=lambda r, i=i: r[i])
        for i, key in enumerate(["metric", "cluster", "source", "value", "cdf_percent"])
    )
)

# This site's row of AcmeTrace's cluster_summary.csv beside the paper's (CSV; the page shows
# it transposed, one line per column), rows dicts keyed by that file's columns.
SUMMARY = Table(*(Column(key) for key in summary_columns()))


# --- The job page (`jobs/detail.html`): each table has its CSV (api_urls "jobs/<id>/<name>.csv").

# Its timeline, rows dispatch.TimelineEntry.
JOB_TIMELINE = Table(
    Column("time_utc", "Time (UTC)", lambda t: iso_utc(t.ts)),
    Column("step", "Step", "kind_label"),
    Column("title", "What"),
    Column("status", "Status"),
    Column("detail", "Detail"),
    Column("url", accessor="url", csv_only=True),
)

# Its allocations with their energy (a job of up to SERIES_GPUS_MAX GPUs), rows
# (AllocationRow, AllocationEnergy or None).
JOB_ALLOCATIONS = Table(
    Column("node", "Node", lambda r: r[0].hostname),
    Column("gpu_index", "GPU", lambda r: r[0].gpu_index, num=True),
    Column("start_utc", "From (UTC)", lambda r: iso_utc(r[0].start)),
    Column("end_utc", "Until (UTC)", lambda r: iso_utc(r[0].end)),
    Column(
        "energy_kwh", "Energy", lambda r: r[1].kwh if r[1] else None, unit="kWh", num=True, digits=4
    ),
    Column("counter_resets", "Counter resets", lambda r: r[1].resets if r[1] else None, num=True),
)

# Its outlier GPUs (a larger job), rows (Outlier, metric title, mean, median): the page shows
# display units, the CSV the stored ones.
JOB_OUTLIERS = Table(
    Column("gpu", "GPU", lambda r: r[0].allocation.label),
    Column("metric", "Metric", lambda r: r[0].metric),
    Column("mean", "Its mean over the job", lambda r: r[0].mean, num=True, digits=4),
    Column("job_median", "Median of the job's GPUs", lambda r: r[0].median, num=True, digits=4),
)

# Its energy per node (a larger job), rows job_page.NodeEnergy.
JOB_NODE_ENERGY = Table(
    Column("node", "Node", "hostname"),
    Column("energy_kwh", "Energy", "kwh", unit="kWh", num=True, digits=4),
    Column("counter_resets", "Counter resets", "resets", num=True),
    Column(
        "per_gpu_kwh",
        "Per GPU: index kWh",
        lambda n: " ".join(f"{i}:{kwh:.4f}" for i, kwh, _ in n.gpus),
    ),
)
