"""Job log windows: the lines around an error, cut from followed stdout/stderr files."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest

from collectors.schema import MAX_WINDOW_LINES, LogWindowIn, parse_node_events
from collectors.watchers import joblogs
from collectors.watchers.joblogs import (
    JobLog,
    JobLogSource,
    PathSource,
    WindowCutter,
    glob_paths,
    job_id_from_path,
    local_slurm_jobs,
    output_path,
    slurm_paths,
)
from collectors.watchers.nodeevents import NodeEventWatcher
from tests.helpers import wait_for
from tests.slurm import slurm_cluster  # noqa: F401 (the session fixture)

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
    # min_uid=0: these files are the test user's, root's where tests run as root.
    source = JobLogSource(
        "seren", "node-01", [glob_paths([str(tmp_path / "jobs/*/*.log")])], min_uid=0
    )
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


def test_colours_and_carriage_returns_are_cleaned_not_shipped():
    cutter = WindowCutter()
    cutter.feed(1, "epoch 1:  10%|#         | 10/100\r epoch 1:  20%|##        | 20/100", TS)
    cutter.feed(2, "\x1b[31mRuntimeError: CUDA error: out of memory\x1b[0m", TS)
    (window,) = cutter.close()
    assert window.lines == [
        "epoch 1:  10%|#         | 10/100  epoch 1:  20%|##        | 20/100",
        "RuntimeError: CUDA error: out of memory",
    ]
    assert window.trigger == "RuntimeError: CUDA error: out of memory"
    LogWindowIn(job_id="1", ts=TS, path="/x", first_line_no=1, lines=window.lines)


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
    paths = glob_paths([str(tmp_path / "*/out.log")])
    source = JobLogSource("seren", "node-01", [paths], tmp_path / "state", min_uid=0)
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
        [JobLogSource("seren", "n1", paths, tmp_path / "st", min_uid=0)], lambda c, n: TOKEN
    )
    append(log, ["ok", "ValueError: bad value"])
    windows_of(first, TS)
    assert len(windows_of(first, TS + 10)) == 1
    first.close()
    append(log, ["ok"] * 3)
    again = NodeEventWatcher(
        [JobLogSource("seren", "n1", paths, tmp_path / "st", min_uid=0)], lambda c, n: TOKEN
    )
    assert windows_of(again, TS + 20) + windows_of(again, TS + 30) == []
    append(log, ["ZeroDivisionError: division by zero"])
    windows_of(again, TS + 40)
    (late,) = windows_of(again, TS + 50)
    assert (
        late.lines[-1] == "ZeroDivisionError: division by zero"
        and "ValueError" not in late.lines[0]
    )


def squeue_rows(argv: list[str], rows: list[dict[str, str]]) -> str:
    """What `squeue -O` prints for `rows`, with the separator `argv` asks for."""
    fmt = argv[argv.index("-O") + 1]
    fields = [f.split(":", 1)[0] for f in fmt.split(",")]
    sep = fmt.split(",")[0].split(":", 1)[1]
    defaults = {"UserID": "1000", "UserName": "alice", "ArrayJobID": "N/A", "ArrayTaskID": "N/A"}
    defaults |= {"BatchHost": "node-01", "WorkDir": "/home/alice", "Name": "train"}
    return "".join(
        "".join(row.get(f, defaults.get(f, "")) + sep for f in fields) + "\n" for row in rows
    )


def test_slurm_names_the_log_files_of_the_jobs_on_this_node():
    calls = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        return squeue_rows(
            argv,
            [
                {"JobID": "101", "STDOUT": "/logs/%j.out", "STDERR": "/logs/%j.err"},
                {"JobID": "102", "STDOUT": "/logs/%x-%4j.log", "STDERR": "/logs/%x-%4j.log"},
            ],
        )

    paths = slurm_paths("node-01", run, local_jobs=set)
    alice_101, alice_102 = JobLog("101", 1000, "alice"), JobLog("102", 1000, "alice")
    assert paths(TS) == {
        "/logs/101.err": alice_101,
        "/logs/101.out": alice_101,
        "/logs/train-0102.log": alice_102,
    }
    assert calls[0][:7] == ["squeue", "-h", "-w", "node-01", "-t", "RUNNING", "-O"]
    paths(TS + 1)  # within the refresh interval: Slurm is not asked again
    assert len(calls) == 1


def test_output_paths_expand_as_sbatch_writes_them():
    f = {"JobID": "7", "UserName": "alice", "ArrayJobID": "5", "ArrayTaskID": "0"}
    f |= {"BatchHost": "gpu-a-001", "WorkDir": "/home/alice/run", "Name": "train"}
    assert output_path("", f, "n") == "/home/alice/run/slurm-5_0.out"
    assert output_path("/o/%A_%a-%x-%u-%N-%4j.%%", f, "n") == "/o/5_0-train-alice-gpu-a-001-0007.%"
    assert output_path("logs/%j.out", f, "n") == "/home/alice/run/logs/7.out"
    assert output_path("/o/a\\%j", f, "n") == "/o/a%j"  # a backslash: no expansion
    plain = f | {"ArrayJobID": "N/A", "ArrayTaskID": "N/A"}
    assert output_path("", plain, "n") == "/home/alice/run/slurm-7.out"


def test_a_job_starting_on_this_host_is_read_at_once_not_at_the_next_refresh():
    """A job that dies in its first minute (a typo, a missing file) must still be read."""
    running: list[str] = []
    local: set[str] = set()
    calls: list[list[str]] = []

    def run(argv: list[str]) -> str:
        calls.append(argv)
        return squeue_rows(argv, [{"JobID": j, "STDOUT": f"/logs/{j}.out"} for j in running])

    scans: list[int] = []

    def local_jobs() -> set[str]:
        scans.append(1)
        return set(local)

    paths = slurm_paths("node-01", run, local_jobs=local_jobs)
    assert paths(TS) == {}
    running.append("201")
    local.add("201")  # its slurmstepd appears 5 s later
    assert paths(TS + 5) == {"/logs/201.out": JobLog("201", 1000, "alice")}
    asked = len(calls)
    assert paths(TS + 8) == {"/logs/201.out": JobLog("201", 1000, "alice")}
    assert len(calls) == asked  # nothing new here: slurmctld is not asked again
    local.add("999")  # a step of another logical node's job on this host: asked once
    paths(TS + 11)
    paths(TS + 14)
    assert len(calls) == asked + 1
    # Rounds closer together than LOCAL_SCAN_S share one scan of the host's processes.
    before = len(scans)
    for k in range(10):
        paths(TS + 20 + k * 0.1)
    assert len(scans) == before + 1


def test_local_slurm_jobs_reads_the_hosts_slurmstepd_processes(tmp_path):
    procs = {
        "101": (b"slurmstepd\n", b"slurmstepd: [4242.batch]\x00"),
        "102": (b"slurmstepd\n", b"slurmstepd: [4242.extern]\x00"),
        "103": (b"slurmstepd\n", b"slurmstepd: [77.0]\x00"),
        "104": (b"python\n", b"slurmstepd: [5.batch]\x00"),  # not what it says it is
        "105": (b"slurmd\n", b"/usr/sbin/slurmd\x00"),
        "107": (b"slurmstepd\n", b"slurmstepd: [40555]\x00"),  # an older release's title
        "108": (b"slurmstepd\n", b"slurmstepd: [12x.batch]\x00"),  # not a job id
    }
    for pid, (comm, cmdline) in procs.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "comm").write_bytes(comm)
        (tmp_path / pid / "cmdline").write_bytes(cmdline)
    (tmp_path / "self").mkdir()
    (tmp_path / "106").mkdir()  # ended between the listing and the read
    assert local_slurm_jobs(tmp_path) == {"4242", "77", "40555"}
    assert local_slurm_jobs(tmp_path / "missing") == set()


# --- As root, a job log is the user's file and nothing else ---------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
OTHER_UID = 12345
SECRET = "root:$6$secret-hash:19000:0:99999:7::: error: this line would open a window"


def slurm_job(job_id: str, user: str, log_path: Path) -> PathSource:
    """The node's one running job, of `user` (`alice(12345)`), as `squeue` describes it."""
    name, uid = user.rstrip(")").split("(")

    def run(argv: list[str]) -> str:
        row = {"JobID": job_id, "UserID": uid, "UserName": name, "STDOUT": str(log_path)}
        return squeue_rows(argv, [row])

    return slurm_paths("node-01", run, local_jobs=set)


def shadow_like(tmp_path: Path) -> Path:
    """A root-only file an attacker would like the agent to ship, as /etc/shadow."""
    secret = tmp_path / "etc" / "shadow"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    return secret


def shipped(paths: PathSource) -> list[str]:
    """Every line the node agent ships from the job logs over a quiet minute."""
    watcher = NodeEventWatcher([JobLogSource("seren", "node-01", [paths])], lambda c, n: TOKEN)
    got = [w for ts in (TS, TS + 1, TS + 10, TS + 60) for w in windows_of(watcher, ts)]
    watcher.close()
    return [line for w in got for line in w.lines]


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "vigil.collector.joblogs" and r.levelno == logging.WARNING
    ]


def job_log(tmp_path: Path, uid: int, lines: list[str]) -> Path:
    path = tmp_path / "jobs" / "42" / "out.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    append(path, lines)
    os.chown(path, uid, uid)
    return path


@as_root
def test_a_regular_log_owned_by_the_jobs_user_is_read(tmp_path, caplog):
    path = job_log(
        tmp_path, OTHER_UID, ["step 1", "RuntimeError: CUDA error: an illegal memory access"]
    )
    lines = shipped(slurm_job("42", "alice(12345)", path))
    assert lines == ["step 1", "RuntimeError: CUDA error: an illegal memory access"]
    assert refusals(caplog) == []


@as_root
@pytest.mark.parametrize(("user", "uid"), [("root(0)", 0), ("daemon(1)", 1), ("svc(999)", 999)])
def test_a_log_owned_by_root_or_a_system_account_is_not_read(tmp_path, caplog, user, uid):
    """Even when Slurm says the job is theirs: the agent reads people's files, nothing else."""
    path = job_log(tmp_path, uid, [SECRET])
    assert shipped(slurm_job("42", user, path)) == []
    assert refusals(caplog) == [
        f"job 42: not reading {path}: owned by uid {uid}, a system account (below 1000)"
    ]


@as_root
def test_the_lowest_uid_read_is_configurable(tmp_path):
    path = job_log(tmp_path, 500, ["OSError: [Errno 5] Input/output error"])
    source = JobLogSource("seren", "node-01", [slurm_job("42", "svc(500)", path)], min_uid=500)
    watcher = NodeEventWatcher([source], lambda c, n: TOKEN)
    got = [line for ts in (TS, TS + 10) for w in windows_of(watcher, ts) for line in w.lines]
    watcher.close()
    assert got == ["OSError: [Errno 5] Input/output error"]


@as_root
def test_a_symlink_to_a_root_only_file_is_not_read_and_warned_once(tmp_path, caplog):
    link = tmp_path / "jobs" / "42" / "out.log"
    link.parent.mkdir(parents=True)
    link.symlink_to(shadow_like(tmp_path))
    for user in ("alice(12345)", "root(0)"):  # not even for a root job: the path is a symlink
        caplog.clear()
        assert shipped(slurm_job("42", user, link)) == []
        assert refusals(caplog) == [f"job 42: not reading {link}: it is a symbolic link"]


@as_root
def test_a_log_owned_by_another_uid_is_not_read(tmp_path, caplog):
    path = job_log(tmp_path, OTHER_UID, [SECRET])
    assert shipped(slurm_job("42", "bo(1001)", path)) == []
    assert refusals(caplog) == [
        f"job 42: not reading {path}: owned by uid {OTHER_UID}, not by the job's user bo (uid 1001)"
    ]


@as_root
def test_a_log_replaced_by_a_symlink_after_rotation_stops_being_read(tmp_path, caplog):
    path = job_log(tmp_path, OTHER_UID, ["step 1"])
    watcher = NodeEventWatcher(
        [JobLogSource("seren", "node-01", [slurm_job("42", "alice(12345)", path)])],
        lambda c, n: TOKEN,
    )
    assert windows_of(watcher, TS) == []  # followed, nothing to ship yet
    append(path, ["ValueError: the last honest line"])
    os.rename(path, path.with_suffix(".log.1"))  # "rotated"...
    path.symlink_to(shadow_like(tmp_path))  # ...and swapped for a link to the secret
    got = [w for ts in (TS + 1, TS + 10, TS + 60) for w in windows_of(watcher, ts)]
    watcher.close()
    lines = [line for w in got for line in w.lines]
    assert lines == ["step 1", "ValueError: the last honest line"]  # the old file, to its end
    assert refusals(caplog) == [f"job 42: not reading {path}: it is a symbolic link"]


@as_root
def test_a_fifo_at_the_log_path_neither_hangs_the_agent_nor_is_read(tmp_path, caplog):
    path = tmp_path / "jobs" / "42" / "out.log"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    os.chown(path, OTHER_UID, OTHER_UID)
    assert stat.S_ISFIFO(path.stat().st_mode)
    assert shipped(slurm_job("42", "alice(12345)", path)) == []
    assert refusals(caplog) == [f"job 42: not reading {path}: not a regular file"]


@as_root
def test_a_directory_symlink_on_the_path_is_followed_only_when_root_made_it(tmp_path, caplog):
    real = tmp_path / "gpfs" / "home"
    path = real / "alice" / "out.log"
    path.parent.mkdir(parents=True)
    append(path, ["KeyError: 'input_ids'"])
    os.chown(path, OTHER_UID, OTHER_UID)
    home = tmp_path / "home"
    home.symlink_to(real)  # an admin's /home -> /gpfs/home: root's link
    via_home = home / "alice" / "out.log"
    assert shipped(slurm_job("42", "alice(12345)", via_home)) == ["KeyError: 'input_ids'"]
    assert refusals(caplog) == []

    # alice's own link from her home to a root-only folder: her log "is" the secret.
    secret = shadow_like(tmp_path)
    os.unlink(path)
    os.symlink(secret.parent, real / "alice" / "logs")
    os.lchown(real / "alice" / "logs", OTHER_UID, OTHER_UID)
    via_alice = home / "alice" / "logs" / "shadow"
    os.chown(secret, OTHER_UID, OTHER_UID)  # owner checks alone would not stop this one
    assert shipped(slurm_job("42", "alice(12345)", via_alice)) == []
    assert refusals(caplog) == [
        f"job 42: not reading {via_alice}: "
        f"'logs' on its path is a symbolic link owned by uid {OTHER_UID}"
    ]


@as_root
def test_a_glob_file_with_no_known_user_is_read_unless_it_is_a_hard_link(tmp_path, caplog):
    pattern = str(tmp_path / "jobs" / "*" / "out.log")
    path = job_log(tmp_path, OTHER_UID, ["OSError: [Errno 5] Input/output error"])
    assert shipped(glob_paths([pattern])) == ["OSError: [Errno 5] Input/output error"]
    os.unlink(path)
    secret = shadow_like(tmp_path)
    os.chown(secret, OTHER_UID + 1, OTHER_UID + 1)  # another person's file
    os.link(secret, path)
    assert shipped(glob_paths([pattern])) == []
    assert refusals(caplog) == [
        f"job 42: not reading {path}: it has 2 hard links and the job's user is not known"
    ]


# --- On a real Slurm: what a job writes in its name chooses nothing --------------------------


@pytest.mark.integration
@as_root
def test_a_job_named_to_point_at_a_root_file_gets_only_its_own_log_read(
    slurm_cluster,  # noqa: F811
    monkeypatch,
    caplog,
):
    """A job whose name spells `StdOut=/etc/shadow UserId=root(0)`, on its first line and on
    lines of their own, runs as an ordinary user: the agent follows the job's real output and
    ships its error, and nothing of the named file."""
    nobody = pwd.getpwnam("nobody")
    root = Path(tempfile.mkdtemp(prefix="vigil-joblog-"))
    try:
        # The job's user must reach its batch script in slurmd's spool under the cluster's
        # private (0700) folder.
        slurm_cluster.root.chmod(0o755)
        root.chmod(0o755)
        secret = shadow_like(root)
        work = root / "work"
        work.mkdir()
        os.chown(work, nobody.pw_uid, nobody.pw_gid)
        forged = f"StdOut={secret} StdErr={secret} UserId=root(0) WorkDir=/etc"
        name = f"t {forged}\n   {forged}\n   StdOut={secret}\n   UserId=root(0)"
        monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
        job_id = slurm_cluster.run(
            "sbatch", "--parsable", f"--uid={nobody.pw_uid}", f"--gid={nobody.pw_gid}",
            f"--chdir={work}", "-o", f"{work}/job-%j.out", "--job-name", name,
            "--wrap", "echo 'RuntimeError: CUDA error: an illegal memory access'; sleep 60",
        ).strip().split(";")[0]  # fmt: skip
        assert job_id.isdigit(), job_id
        watcher = NodeEventWatcher(
            [
                JobLogSource(
                    slurm_cluster.cluster_name,
                    slurm_cluster.node,
                    [slurm_paths(slurm_cluster.node)],
                )
            ],
            lambda c, n: TOKEN,
        )
        seen: list[LogWindowIn] = []
        rounds = iter(range(10_000))

        def shipped_lines() -> list[str]:
            # Rounds 10 s apart on the agent's clock: a window closes once its file is quiet.
            seen.extend(windows_of(watcher, time.time() + 10 * next(rounds)))
            return [line for w in seen for line in w.lines]

        lines = wait_for(shipped_lines, timeout=60, interval=0.5)
        watcher.close()
        assert not [line for line in lines if "secret-hash" in line]
        assert lines == ["RuntimeError: CUDA error: an illegal memory access"]
        assert {(w.job_id, w.path) for w in seen} == {(job_id, str(work / f"job-{job_id}.out"))}
        assert not [m for m in refusals(caplog) if str(secret) in m]  # never even opened
    finally:
        slurm_cluster.cancel_all()
        shutil.rmtree(root, ignore_errors=True)
