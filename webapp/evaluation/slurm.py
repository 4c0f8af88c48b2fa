"""The Slurm side of an evaluation: each planned job's batch script and sbatch command line,
and the evaluation program's phase report. Plain functions (no database).

Every job runs VIGIL_EVAL_PROGRAM with its phase and datasets:

    <program> --phase coupled|load|infer|metrics --model PATH --datasets a:1:1,b:2:3
              --load-s S --infer-s S --metrics-s S --outputs DIR --report FILE

`a:2:3` is shard 2 of 3 of dataset a. The `-s` values are the planner's predictions (a real
program ignores them; the tests' stand-in sleeps them). `load` copies the checkpoint into
node-local shared memory; `infer` reads it from there, infers and writes its outputs under
DIR; `metrics` computes the metrics from those outputs on CPUs; `coupled` does all three.
The program writes FILE, JSON `{"phases": {"load": [t0, t1], ...}}` in epoch seconds, so the
run's actual per-phase times are known to the second's fraction.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

GPU_KINDS = ("coupled", "infer")


def datasets_arg(datasets: Sequence[Sequence]) -> str:
    return ",".join(f"{name}:{shard}:{shards}" for name, shard, shards in datasets)


def job_name(run_id: int, key: str) -> str:
    # "eval" in the name: the jobs app's default type rules make it an evaluation job.
    return f"vigil-eval-{run_id}-{key}"


def job_script(
    program: Sequence[str],
    *,
    kind: str,
    model_path: str,
    datasets: Sequence[Sequence],
    phases: Mapping[str, float],
    outputs: Path,
    report: Path,
) -> str:
    argv = [
        *program,
        "--phase",
        kind,
        "--model",
        model_path,
        "--datasets",
        datasets_arg(datasets),
        "--load-s",
        f"{phases.get('load', 0.0):.3f}",
        "--infer-s",
        f"{phases.get('infer', 0.0):.3f}",
        "--metrics-s",
        f"{phases.get('metrics', 0.0):.3f}",
        "--outputs",
        str(outputs),
        "--report",
        str(report),
    ]
    return "#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + "\n"


def sbatch_argv(
    *,
    run_id: int,
    key: str,
    kind: str,
    node: str,
    after: Sequence[str],
    workdir: Path,
    script: Path,
) -> list[str]:
    """One job's sbatch: a GPU for coupled and inference jobs; pinned to the plan's node (the
    loader, the inference that reads its shared memory, the coupled trials the plan put
    there), metric jobs anywhere; `afterok` on what it needs, and cancelled by Slurm if that
    failed (the executor then retries both)."""
    argv = [
        "sbatch",
        "--parsable",
        # sbatch runs with command_env's few variables (PATH, HOME, locale, SLURM_CONF), so
        # ALL exports just those: none of Vigil's settings or secrets. NONE (or a list) makes
        # slurmd build the user's login environment (su -) for each job, a login shell that
        # every short evaluation job would wait for.
        "--export=ALL",
        f"--job-name={job_name(run_id, key)}",
        f"--comment=vigil-eval-{run_id}",
        f"--chdir={workdir}",
        f"--output={workdir / (key + '.%j.out')}",
        "--ntasks=1",
    ]
    if kind in GPU_KINDS:
        argv.append("--gres=gpu:1")
    if kind != "metrics":
        argv.append(f"--nodelist={node}")
    if after:
        argv += [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"]
    return [*argv, str(script)]


def report_read(path: Path) -> dict[str, list[float]]:
    """The phases of a program's report ({} if it wrote none or it is unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    phases = data.get("phases") if isinstance(data, dict) else None
    if not isinstance(phases, dict):
        return {}
    out = {}
    for name, span in phases.items():
        if (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(v, int | float) for v in span)
            and span[1] >= span[0]
        ):
            out[str(name)] = [float(span[0]), float(span[1])]
    return out
