"""Job log windows: the lines around an error, cut from followed stdout/stderr files."""

from __future__ import annotations

import os
from pathlib import Path

from collectors.schema import MAX_WINDOW_LINES, LogWindowIn, parse_node_events
from collectors.watchers import joblogs
from collectors.watchers.joblogs import (
    JobLogSource,
    WindowCutter,
    glob_paths,
    job_id_from_path,
    slurm_paths,
)
from collectors.watchers.nodeevents import NodeEventWatcher

TOKEN = "j" * 32
TS = 1_760_000_000.0

PROGRESS = [
    f"[rank{r}]: iteration {i:>6} | lm loss: 2.31E+00 | elapsed time per iteration (ms): 4211"
    for i in range(100, 130)
    for r in (0, 1)
]
TRACEBACK = [
    f"[rank{r}]: {line}"
    for r in (0, 1)
    for line in (
        "Traceback (most recent call last):",
        '  File "/home/bo/llm/train.py", line 57, in <module>',
        "    main()",
        '  File "/home/bo/llm/train.py", line 133, in main',
        "    batch = collate(samples)",
        "KeyError: 'input_ids'",
    )
]


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


def windows_of(watcher: NodeEventWatcher, ts: float) -> list[LogWindowIn]:
    out = []
    for _, text in watcher.poll(ts):
        out.extend(parse_node_events(text).log_windows)
    watcher.commit()
    return out


def test_job_id_comes_from_a_wildcard_part_of_the_path():
    assert job_id_from_path("/var/log/jobs/*/*.log", "/var/log/jobs/48213/rank0.log") == "48213"
    assert job_id_from_path("/logs/slurm-*.out", "/logs/slurm-777_3.out") == "777_3"
    assert job_id_from_path("/logs/*.out", "/logs/notes.out") is None


def test_a_traceback_ships_as_one_window_with_its_rank_prefixes(tmp_path):
    log = tmp_path / "jobs" / "48213" / "node-01.log"
    log.parent.mkdir(parents=True)
    source = JobLogSource("seren", "node-01", [glob_paths([str(tmp_path / "jobs/*/*.log")])])
    watcher = NodeEventWatcher([source], lambda c, n: TOKEN)
    append(log, PROGRESS)
    assert windows_of(watcher, TS) == []
    append(log, TRACEBACK)
    assert windows_of(watcher, TS + 1) == []  # the burst may go on: not shipped yet
    (window,) = windows_of(watcher, TS + 1 + joblogs.QUIET_CLOSE_S)  # the job went quiet
    assert window.job_id == "48213" and window.path == str(log)
    assert window.lines[-len(TRACEBACK) :] == TRACEBACK  # both ranks, prefixes kept
    before = window.lines[: -len(TRACEBACK)]
    assert before == PROGRESS[-joblogs.BEFORE_LINES :]  # context before the error
    assert window.first_line_no == len(PROGRESS) - joblogs.BEFORE_LINES + 1
    assert window.trigger == "Traceback (most recent call last):"
    assert windows_of(watcher, TS + 60) == []  # sent once


def test_a_window_closes_after_enough_ordinary_lines_and_a_new_burst_opens_another():
    cutter = WindowCutter()
    closed = []
    lines = ["step ok"] * 5 + ["NCCL WARN NET/IB : Got completion from peer"] + ["step ok"] * 30
    lines += ["RuntimeError: boom"] + ["step ok"] * 30
    for no, text in enumerate(lines, 1):
        closed += cutter.feed(no, text, TS)
    assert len(closed) == 2
    assert closed[0].first_line_no == 1 and len(closed[0].lines) == 6 + joblogs.AFTER_LINES
    assert closed[1].trigger == "RuntimeError: boom"


def test_an_error_storm_is_one_capped_window():
    cutter = WindowCutter()
    closed = []
    for no in range(1, 3000):
        closed += cutter.feed(no, f"[rank{no % 64}]: NCCL WARN Call to ibv_poll_cq failed", TS)
    for no in range(3000, 3100):
        closed += cutter.feed(no, "ok", TS)
    assert len(closed) == 1 and len(closed[0].lines) == MAX_WINDOW_LINES


def test_rotation_and_truncation_mid_run_keep_the_log_followed(tmp_path):
    log = tmp_path / "77" / "out.log"
    log.parent.mkdir()
    source = JobLogSource(
        "seren", "node-01", [glob_paths([str(tmp_path / "*/out.log")])], tmp_path / "state"
    )
    watcher = NodeEventWatcher([source], lambda c, n: TOKEN)
    append(log, PROGRESS[:10])
    windows_of(watcher, TS)
    os.rename(log, log.with_suffix(".log.1"))
    append(log.with_suffix(".log.1"), ["[rank0]: RuntimeError: first, in the rotated file"])
    append(log, ["[rank0]: fresh file after rotation"])
    windows_of(watcher, TS + 1)
    with open(log, "r+") as fh:
        fh.truncate(0)
    windows_of(watcher, TS + 2)
    append(log, ["[rank1]: torch.OutOfMemoryError: CUDA out of memory."])
    got = windows_of(watcher, TS + 3) + windows_of(watcher, TS + 20)
    lines = [line for w in got for line in w.lines]
    assert lines.count("[rank0]: RuntimeError: first, in the rotated file") == 1
    assert lines.count("[rank1]: torch.OutOfMemoryError: CUDA out of memory.") == 1
    assert all(w.job_id == "77" for w in got)


def test_a_restarted_source_does_not_ship_the_same_window_again(tmp_path):
    log = tmp_path / "5" / "out.log"
    log.parent.mkdir()
    paths = [glob_paths([str(tmp_path / "*/out.log")])]
    first = NodeEventWatcher(
        [JobLogSource("seren", "n1", paths, tmp_path / "st")], lambda c, n: TOKEN
    )
    append(log, ["ok", "ValueError: bad value"])
    windows_of(first, TS)
    assert len(windows_of(first, TS + 10)) == 1
    first.close()
    append(log, ["ok"] * 3)
    again = NodeEventWatcher(
        [JobLogSource("seren", "n1", paths, tmp_path / "st")], lambda c, n: TOKEN
    )
    assert windows_of(again, TS + 20) + windows_of(again, TS + 30) == []
    append(log, ["ZeroDivisionError: division by zero"])
    windows_of(again, TS + 40)
    (late,) = windows_of(again, TS + 50)
    assert (
        late.lines[-1] == "ZeroDivisionError: division by zero"
        and "ValueError" not in late.lines[0]
    )


def test_slurm_names_the_log_files_of_the_jobs_on_this_node():
    calls = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        if argv[0] == "squeue":
            return "101\n102\n"
        job = argv[-1]
        return (
            f"JobId={job} JobName=train\n   StdErr=/logs/{job}.err\n   StdIn=/dev/null\n"
            f"   StdOut=/logs/{job}.out\n   Power="
        )

    paths = slurm_paths("node-01", run)
    assert paths(TS) == {
        "/logs/101.err": "101",
        "/logs/101.out": "101",
        "/logs/102.err": "102",
        "/logs/102.out": "102",
    }
    assert calls[0] == ["squeue", "-h", "-w", "node-01", "-t", "RUNNING", "-o", "%i"]
    paths(TS + 1)  # within the refresh interval: Slurm is not asked again
    assert len(calls) == 3
