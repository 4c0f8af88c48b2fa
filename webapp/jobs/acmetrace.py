"""AcmeTrace job traces (Hu et al., NSDI'24; InternLM/AcmeTrace): the row parser and a generator.

Schema (shared/acmetrace/README.md): `job_id, user, node_num, gpu_num, cpu_num, type, state,
submit_time, start_time, end_time, duration, queue, gpu_time`; Kalos adds `mem_per_pod_GB,
shared_mem_per_pod, fail_time, stop_time`. Times are ISO strings with an offset
(`2023-03-01 00:23:58+08:00`). Columns are found by name, so either file's order works.

`RowParser.parse` is the import's hot loop (a million rows per trace): it returns plain tuples
with times as epoch seconds (PostgreSQL's to_timestamp() makes them timestamptz) and caches
the hour part of each timestamp, because building a datetime per value would cost more than
everything else together. Pure Python, no Django.

`synthesize` writes a file with exactly this schema and the paper's workload mix (type shares by
count, sizes, heavy-tailed durations, final states; reference/acme-workload.md), for tests and
benchmarks while the real traces are not here.
"""

from __future__ import annotations

import csv
import math
import random
import time
from datetime import datetime
from pathlib import Path

COMMON_COLUMNS = (
    "job_id",
    "user",
    "node_num",
    "gpu_num",
    "cpu_num",
    "type",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
    "gpu_time",
)
KALOS_COLUMNS = ("mem_per_pod_GB", "shared_mem_per_pod", "fail_time", "stop_time")
SEREN_HEADER = COMMON_COLUMNS
# Column order of the public Kalos file (its example row in the AcmeTrace README).
KALOS_HEADER = (
    "job_id",
    "user",
    "node_num",
    "gpu_num",
    "cpu_num",
    "mem_per_pod_GB",
    "shared_mem_per_pod",
    "type",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "fail_time",
    "stop_time",
    "duration",
    "queue",
    "gpu_time",
)

# AcmeTrace `type` -> JobType value.
TYPES = {
    "Eval": "eval",
    "Pretrain": "pretrain",
    "SFT": "sft",
    "MLLM": "mllm",
    "Debug": "debug",
    "Other": "other",
}
# AcmeTrace `state` (Slurm's names) -> JobState value. RUNNING: 3 Kalos jobs still ran when the
# trace was cut; PENDING is accepted for the same reason.
STATES = {
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    "FAILED": "failed",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_fail",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out_of_memory",
    "RUNNING": "running",
    "PENDING": "pending",
}
MAX_COUNT = 1_000_000  # nodes, GPUs or CPUs of one job; the largest in AcmeTrace is 1,024 GPUs
MAX_ID = 128  # Job.scheduler_id / Job.user length

# A parsed row, in the import's COPY column order.
ParsedRow = tuple[str, str, str, str, float, float | None, float | None, int, int, int]


class RowError(ValueError):
    """A row that cannot be imported. `code` is a short stable name for counting."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RowParser:
    """Validates rows of one file, whose header names the columns."""

    def __init__(self, header: list[str] | None) -> None:
        if not header:
            raise ValueError("the file is empty (expected a header row)")
        names = [h.strip() for h in header]
        missing = [c for c in COMMON_COLUMNS if c not in names]
        if missing:
            raise ValueError(f"missing column(s) {', '.join(missing)}")
        self.width = len(names)
        self.index = {c: names.index(c) for c in COMMON_COLUMNS}
        self.kalos = all(c in names for c in KALOS_COLUMNS)
        # Full timestamp string -> epoch; and (date + hour, offset) -> epoch of that hour.
        self._ts: dict[str, float] = {}
        self._hours: dict[str, float] = {}

    def parse(self, row: list[str]) -> ParsedRow:
        """The row as (job_id, user, type, state, submit, start, end, gpus, nodes, cpus);
        RowError naming the column and the problem otherwise."""
        if len(row) != self.width:
            raise RowError("columns", f"expected {self.width} columns, found {len(row)}")
        ix = self.index
        job_id = row[ix["job_id"]]
        if not job_id or len(job_id) > MAX_ID:
            raise RowError("job_id", f"job_id: must be 1-{MAX_ID} characters, got {job_id!r}")
        user = row[ix["user"]]
        if len(user) > MAX_ID:
            raise RowError("user", f"user: longer than {MAX_ID} characters")
        job_type = TYPES.get(row[ix["type"]])
        if job_type is None:
            raise RowError(
                "unknown_type",
                f"type: unknown type {row[ix['type']]!r} (expected one of {', '.join(TYPES)})",
            )
        state = STATES.get(row[ix["state"]])
        if state is None:
            raise RowError(
                "unknown_state",
                f"state: unknown state {row[ix['state']]!r} (expected one of {', '.join(STATES)})",
            )
        nodes = _count(row[ix["node_num"]], "node_num")
        gpus = _count(row[ix["gpu_num"]], "gpu_num")
        cpus = _count(row[ix["cpu_num"]], "cpu_num")
        submit = self.epoch(row[ix["submit_time"]], "submit_time")
        if submit is None:
            raise RowError("missing_time", "submit_time: empty")
        start = self.epoch(row[ix["start_time"]], "start_time")
        end = self.epoch(row[ix["end_time"]], "end_time")
        if start is not None and start < submit:
            raise RowError(
                "start_before_submit",
                f"start_time {row[ix['start_time']]} is before submit_time "
                f"{row[ix['submit_time']]}",
            )
        if end is not None and (end < submit if start is None else end < start):
            raise RowError(
                "end_before_start",
                f"end before start: end_time {row[ix['end_time']]} is before "
                f"{'start_time ' + row[ix['start_time']] if start is not None else 'submit_time'}",
            )
        for column in ("duration", "queue", "gpu_time"):
            value = row[ix[column]]
            if value:
                try:
                    number = float(value)
                except ValueError:
                    raise RowError("not_a_number", f"{column}: not a number: {value!r}") from None
                if not number >= 0:  # also refuses NaN
                    raise RowError("negative", f"{column}: negative ({value})")
        return (job_id, user, job_type, state, submit, start, end, gpus, nodes, cpus)

    def epoch(self, value: str, column: str) -> float | None:
        """Epoch seconds of an ISO time with an offset; None for an empty cell."""
        if not value:
            return None
        cached = self._ts.get(value)
        if cached is not None:
            return cached
        result = None
        # Fast path for the traces' exact shape `YYYY-MM-DD HH:MM:SS+HH:MM`: the hour's epoch is
        # cached and minutes and seconds added.
        if len(value) == 25 and value[13] == ":" and value[16] == ":":
            minute, second = value[14:16], value[17:19]
            if minute.isdigit() and second.isdigit() and minute < "60" and second < "60":
                key = value[:13] + value[19:]
                hour = self._hours.get(key)
                if hour is None:
                    hour = self._hours[key] = _iso_epoch(
                        f"{value[:13]}:00:00{value[19:]}", column, value
                    )
                result = hour + int(minute) * 60 + int(second)
        if result is None:
            result = _iso_epoch(value, column, value)
        if len(self._ts) > 2_000_000:  # bound the memory on a file of all-distinct times
            self._ts.clear()
        self._ts[value] = result
        return result


def _iso_epoch(text: str, column: str, original: str) -> float:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tzinfo is not None:
        return parsed.timestamp()
    # Tell a bad offset from a bad date: the first 19 characters parse on their own.
    try:
        datetime.fromisoformat(original[:19])
        date_ok = len(original) >= 19
    except ValueError:
        date_ok = False
    if date_ok or parsed is not None:
        raise RowError(
            "bad_time_zone",
            f"{column}: bad time zone in {original!r} (expected an offset like +08:00)",
        )
    raise RowError("bad_time", f"{column}: not an ISO time: {original!r}")


def _count(value: str, column: str) -> int:
    try:
        number = int(value)
    except ValueError:
        try:  # a file written by pandas may say "8.0"
            as_float = float(value)
        except ValueError:
            as_float = math.nan
        if not as_float.is_integer():
            raise RowError("not_an_integer", f"{column}: not an integer: {value!r}") from None
        number = int(as_float)
    if number < 0:
        raise RowError("negative", f"{column}: negative ({value})")
    if number > MAX_COUNT:
        raise RowError("too_large", f"{column}: {value} is more than {MAX_COUNT:,}")
    return number


# --- Generator ---------------------------------------------------------------------------

# Type shares of GPU jobs by count (reference/acme-workload.md section 2).
_MIX = {
    "seren": {"Eval": 64.9, "Pretrain": 0.9, "SFT": 14.9, "MLLM": 2.9, "Debug": 1.9, "Other": 14.6},
    "kalos": {"Eval": 92.8, "Pretrain": 3.2, "Debug": 2.7, "Other": 1.3},
}
# GPUs per job by type: (sizes, weights). Evaluation usually under 4 GPUs, pretraining often
# over 100 (Seren median about 128, Kalos 256-512), debug varies widely (section 3).
_SIZES = {
    "Eval": ((1, 2, 4, 8), (70, 12, 10, 8)),
    "Pretrain": ((32, 64, 128, 256, 512, 1024), (10, 15, 30, 25, 15, 5)),
    "SFT": ((1, 8, 16, 32, 64), (20, 40, 20, 15, 5)),
    "MLLM": ((8, 16, 32, 64, 128), (30, 25, 20, 15, 10)),
    "Debug": ((1, 2, 4, 8, 16, 64, 256), (35, 10, 15, 20, 10, 7, 3)),
    "Other": ((1, 2, 4, 8, 16), (55, 10, 10, 20, 5)),
}
# Median duration multiplier by type; pretraining runs longest but within about 10x (section 3).
_DURATION_SCALE = {
    "Eval": 0.8,
    "Pretrain": 8.0,
    "SFT": 2.0,
    "MLLM": 3.0,
    "Debug": 1.0,
    "Other": 1.0,
}
# Final states of GPU jobs by count (section 4; PREEMPTED about 9.7% of Seren GPU jobs, TIMEOUT
# and NODE_FAIL rare, 3 RUNNING jobs in Kalos).
_STATES = {
    "seren": (
        ("COMPLETED", "CANCELLED", "FAILED", "PREEMPTED", "TIMEOUT", "NODE_FAIL"),
        (45.0, 6.0, 38.0, 9.0, 1.5, 0.5),
    ),
    "kalos": (
        ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "RUNNING"),
        (54.1, 6.2, 38.7, 0.6, 0.39, 0.01),
    ),
}
_CPU_JOB_SHARE = {"seren": 0.35, "kalos": 0.68}  # CPU jobs among all jobs (section 1)
_OFFSET = {"seren": ("+08:00", 8 * 3600), "kalos": ("+00:00", 0)}
_START = {"seren": "2023-03-01 00:00:00+08:00", "kalos": "2023-05-01 00:00:00+00:00"}
# About 5,600 jobs a day in Seren (3,600 GPU + 2,000 CPU); Kalos far fewer.
_JOBS_PER_DAY = {"seren": 5600, "kalos": 400}
# Durations: lognormal with median 122 s and mean/median about 11.6 (Seren: 122 / 1,414 s)
# -> sigma = sqrt(2 ln 11.6) = 2.2; capped at the trace's longest job, 14 days.
_DURATION_MEDIAN_S, _DURATION_SIGMA, _DURATION_MAX_S = 122.0, 2.2, 1_209_604


def synthesize(path: str | Path, rows: int, seed: int = 0, cluster_flavour: str = "seren") -> Path:
    """Write `rows` jobs in the AcmeTrace schema of `cluster_flavour` (seren or kalos)."""
    if cluster_flavour not in _MIX:
        raise ValueError(f"cluster_flavour: expected seren or kalos, got {cluster_flavour!r}")
    rng = random.Random(seed)
    kalos = cluster_flavour == "kalos"
    mix_types, mix_weights = zip(*_MIX[cluster_flavour].items(), strict=True)
    state_names, state_weights = _STATES[cluster_flavour]
    suffix, offset_s = _OFFSET[cluster_flavour]
    hour_prefix: dict[int, str] = {}

    def stamp(epoch: int) -> str:
        local = epoch + offset_s
        hour = local // 3600
        prefix = hour_prefix.get(hour)
        if prefix is None:
            prefix = hour_prefix[hour] = time.strftime("%Y-%m-%d %H", time.gmtime(hour * 3600))
        rest = local - hour * 3600
        return f"{prefix}:{rest // 60:02d}:{rest % 60:02d}{suffix}"

    # Draw the categorical columns in bulk (much faster than one choices() call per row).
    types = rng.choices(mix_types, mix_weights, k=rows)
    states = rng.choices(state_names, state_weights, k=rows)
    cpu_job = [rng.random() < _CPU_JOB_SHARE[cluster_flavour] for _ in range(rows)]
    sizes = {t: rng.choices(*_SIZES[t], k=rows) for t in mix_types}
    mean_gap_s = 86400 / _JOBS_PER_DAY[cluster_flavour]
    t = int(datetime.fromisoformat(_START[cluster_flavour]).timestamp())
    mu = math.log(_DURATION_MEDIAN_S)
    kalos_chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    path = Path(path)
    with path.open("w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(KALOS_HEADER if kalos else SEREN_HEADER)
        for i in range(rows):
            t += int(rng.expovariate(1 / mean_gap_s))
            job_type, state = types[i], states[i]
            if cpu_job[i]:
                gpus, nodes, cpus = 0, 1, rng.choice((4, 8, 16, 32, 64))
                duration = int(min(rng.lognormvariate(math.log(14), 1.5), _DURATION_MAX_S))
            else:
                gpus = sizes[job_type][i]
                nodes, cpus = -(-gpus // 8), 16 * gpus  # 8 GPUs and 128 CPUs per node
                duration = int(
                    min(
                        rng.lognormvariate(mu, _DURATION_SIGMA) * _DURATION_SCALE[job_type],
                        _DURATION_MAX_S,
                    )
                )
            # Queueing: most jobs start within a second; evaluation waits longest (section 3).
            waits = rng.random() < (0.53 if job_type == "Eval" else 0.3)
            queue = int(rng.lognormvariate(math.log(60), 2.5)) if waits else rng.randint(0, 1)
            submit, start = t, t + queue
            end = start + duration
            job_id = (
                "dlc" + "".join(rng.choices(kalos_chars, k=13)) if kalos else str(5_000_000 + i)
            )
            user = f"u{rng.randint(1, 9999):04d}" if not kalos else f"u{rng.randint(0, 4095):03x}"
            end_text = "" if state == "RUNNING" else stamp(end)
            common = [job_id, user, nodes, gpus, cpus]
            times = [stamp(submit), stamp(start), end_text]
            if kalos:
                # The public Kalos file counts duration from submission (its example row:
                # queue 10 s, end - start 8 s, duration 18 s).
                duration_text = "" if state == "RUNNING" else str(end - submit)
                gpu_time = "" if state == "RUNNING" else f"{(end - submit) * gpus:.1f}"
                out.writerow(
                    [
                        *common,
                        rng.choice((100, 500, 1000)) if gpus else 50,
                        rng.choice((10.0, 100.0)),
                        job_type,
                        state,
                        *times,
                        end_text if state == "FAILED" else "",
                        end_text if state == "CANCELLED" else "",
                        duration_text,
                        f"{float(queue):.1f}",
                        gpu_time,
                    ]
                )
            else:
                out.writerow(
                    [*common, job_type, state, *times, duration, queue, f"{duration * gpus:.1f}"]
                )
    return path
