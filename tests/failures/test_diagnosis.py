"""The diagnosis engine on the labelled corpus and on the inputs that must never crash it.

Plain functions over files: no database, broker or Django models involved.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from webapp.failures import diagnosis, taxonomy
from webapp.failures.diagnosis import (
    EVIDENCE_LINES,
    EVIDENCE_TEXT_CHARS,
    diagnose_paths,
    diagnose_text,
)

CORPUS = Path(__file__).resolve().parent.parent / "data" / "failure_logs"
DATA = CORPUS.parent
LABELS = yaml.safe_load((CORPUS / "labels.yaml").read_text())


def test_corpus_covers_every_cause_twice():
    counts = defaultdict(int)
    for label in LABELS.values():
        counts[label["cause"]] += 1
    assert len(LABELS) >= 60
    assert {c: n for c, n in counts.items() if n < 2} == {}
    assert set(counts) == set(taxonomy.CAUSES)


def test_corpus_accuracy_per_cause(capsys):
    """At least 95% of the corpus gets the labelled cause (and blamed node where labelled)."""
    per_cause: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses = []
    for name, label in sorted(LABELS.items()):
        result = diagnose_paths(CORPUS / name)
        ok = result.cause == label["cause"]
        if ok and label.get("blamed_node"):
            ok = result.blamed_node == label["blamed_node"]
        per_cause[label["cause"]][0] += ok
        per_cause[label["cause"]][1] += 1
        if not ok:
            misses.append(f"{name}: expected {label}, got {result.cause} on {result.blamed_node}")
    with capsys.disabled():
        print("\ncause                 correct/total")
        for cause in taxonomy.CAUSES:
            good, total = per_cause.get(cause, [0, 0])
            print(f"{cause:22s} {good}/{total}")
        total_good = sum(g for g, _ in per_cause.values())
        print(f"{'all':22s} {total_good}/{len(LABELS)} = {total_good / len(LABELS):.1%}")
        for miss in misses:
            print("MISS", miss)
    assert total_good / len(LABELS) >= 0.95, misses


NCCL_TIMEOUTS = "\n".join(
    f"[rank{r}]:[E0507 03:22:40.991 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=84213, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=600000) ran for 600082 milliseconds before timing out."
    for r in range(16)
)
XID_79 = "node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, GPU has fallen off the bus.\n"


def test_nccl_timeout_everywhere_plus_xid79_is_gpu_off_bus_on_that_node():
    result = diagnose_text(NCCL_TIMEOUTS + "\n", kernel_log="[12345.678901] " + XID_79)
    assert (result.cause, result.blamed_node, result.blamed_gpu) == (
        "gpu_off_bus",
        "node-12",
        "0000:3b:00",
    )
    assert result.rule_id == "kernel-xid"
    assert result.action == "reboot"  # RESTART_BM in NVIDIA's Xid catalog
    assert result.category == "infrastructure"
    assert "nccl_timeout" in result.symptoms
    assert "fallen off the bus" in result.evidence[0].text


def test_nccl_timeout_alone_stays_a_symptom_with_locate_restart():
    result = diagnose_text(NCCL_TIMEOUTS + "\n")
    assert result.cause == "nccl_timeout"
    assert result.action == "locate_restart"
    assert result.blamed_node is None
    assert result.confidence <= 0.6


def test_combined_capture_diagnoses_like_log_plus_kernel_log():
    """Kernel and scheduler lines inside LOGFILE count exactly as if given separately."""
    kernel = (
        "May 07 03:21:02 node-12 kernel: NVRM: Xid (PCI:0000:b7:00): 74, pid=1234, name=python, "
        "NVLink: fatal error detected on link 3(0x10000, 0x0)\n"
    )
    job = NCCL_TIMEOUTS + "\nsrun: error: node-03: task 3: Exited with exit code 1\n"
    split = diagnose_text(job, kernel_log=kernel)
    combined = diagnose_text(job[:400] + "\n" + kernel + job[400:])
    for field in ("cause", "category", "action", "blamed_node", "blamed_gpu", "rule_id", "detail"):
        assert getattr(split, field) == getattr(combined, field), field
    assert split.cause == "gpu_nvlink" and split.blamed_node == "node-12"


def test_scheduler_line_inside_log_decides_outcome():
    text = (
        "[rank0]: step 100 loss 2.1\n"
        "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T12:00:04 DUE TO "
        "TIME LIMIT ***\n"
    )
    result = diagnose_text(text)
    assert (result.cause, result.category, result.action) == ("timeout", "outcome", "none")


def test_kernel_lines_of_other_nodes_are_ignored_when_nodes_are_known():
    result = diagnose_text(
        NCCL_TIMEOUTS + "\n", kernel_log=XID_79, job_nodes=["node-01", "node-02"]
    )
    assert result.cause == "nccl_timeout"


def test_events_outside_the_window_do_not_decide():
    old = "[2024-05-07 01:00:00] [rank0]: wandb.errors.CommError: could not connect\n"
    late = "".join(
        f"[2024-05-07 03:{m:02d}:00] iteration {m} | lm loss: 2.0 |\n" for m in range(60)
    )
    end = "[2024-05-07 03:59:30] [rank0]: KeyError: 'labels'\n"
    assert diagnose_text(old + late + end).cause == "user_exception"
    assert diagnose_text(old + late).cause == "unknown"


def test_innermost_frame_decides_framework_or_script():
    def tb(path: str) -> str:
        return (
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/home/bob/train.py", line 10, in <module>\n'
            f'[rank1]:   File "{path}", line 99, in f\n'
            "[rank1]:     x = y[k]\n"
            "[rank1]: KeyError: 'k'\n"
        )

    user = diagnose_text(tb("/home/bob/util.py"))
    lib = diagnose_text(tb("/opt/conda/lib/python3.10/site-packages/transformers/trainer.py"))
    assert (user.cause, user.category, user.acme_alias) == ("user_exception", "script", "KeyError")
    assert (lib.cause, lib.category) == ("framework_exception", "framework")


def test_same_input_same_output():
    text = (CORPUS / "gpu_off_bus_1.log").read_bytes()
    assert diagnose_text(text) == diagnose_text(text)


def test_evidence_is_capped_in_count_and_length():
    huge_line = (
        "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered " + "x" * 50000
    )
    lines = [huge_line] + [f"[rank{r}]: ValueError: bad {r}" for r in range(500)]
    result = diagnose_text("\n".join(lines))
    assert result.cause == "cuda_fault"
    assert len(result.evidence) <= EVIDENCE_LINES
    assert all(len(e.text) <= EVIDENCE_TEXT_CHARS + 10 for e in result.evidence)
    assert result.evidence[0].line == 1


def test_empty_file_gets_a_clear_answer(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    result = diagnose_paths(path)
    assert result.cause == "unknown"
    assert "empty" in result.detail


def test_binary_garbage_gets_a_clear_answer(tmp_path):
    path = tmp_path / "core.bin"
    path.write_bytes(os.urandom(3 << 20))
    result = diagnose_paths(path)
    assert result.cause == "unknown"
    assert "binary" in result.detail
    json.dumps(result.as_dict())  # printable whatever the input


def test_invalid_utf8_is_decoded_with_replacement(tmp_path):
    path = tmp_path / "latin1.log"
    path.write_bytes(
        b"caf\xe9 \xff\xfe step 1\n[rank2]: OSError: [Errno 28] No space left on device \xc3\x28\n"
    )
    result = diagnose_paths(path)
    assert result.cause == "filesystem"
    assert "\ufffd" in result.evidence[0].text
    json.dumps(result.as_dict())


def test_huge_sparse_log_is_streamed(tmp_path):
    """2 GiB (sparse: mostly NUL bytes) with text at both ends: streamed, never read whole."""
    path = tmp_path / "huge.log"
    with open(path, "wb") as f:
        f.write(b"[rank0]: starting\n")
        f.seek(2 * 1024**3)
        f.write(b"\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    result = diagnose_paths(path)
    assert result.cause == "gpu_oom"
    assert result.bytes_scanned > 2 * 1024**3


def test_missing_file_raises_oserror_naming_it(tmp_path):
    with pytest.raises(OSError) as info:
        diagnose_paths(tmp_path / "nope.log")
    assert "nope.log" in str(info.value)


def test_same_diagnoses_without_re2s_private_match_binding(monkeypatch):
    """The scan's fast path uses a private google-re2 binding; if a release drops it, the
    public finditer() must give the very same diagnoses."""
    names = sorted(LABELS)[::6]
    fast = [diagnose_paths(CORPUS / name) for name in names]
    monkeypatch.setattr(diagnosis.scan, "_RE2_ANCHOR", None)
    slow = [diagnose_paths(CORPUS / name) for name in names]
    assert [(r.cause, r.blamed_node, r.evidence) for r in slow] == [
        (r.cause, r.blamed_node, r.evidence) for r in fast
    ]
    assert {r.cause for r in slow} == {LABELS[name]["cause"] for name in names}


# Blame from the rank-to-host maps launchers print. Each blamed host is one
# the log itself names; line wordings are the real ones of the threads cited in rules.yaml.


def test_srun_task_line_names_the_host_of_a_labelled_task():
    log = (
        "0: step 10 loss 2.1\n"
        "3: Traceback (most recent call last):\n"
        '3:   File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py",'
        " line 1501, in _call_impl\n"
        "3: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "srun: error: gpu-node-07: task 3: Exited with exit code 1\n"
        "srun: error: gpu-node-02: tasks 0-2: Terminated\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("cuda_fault", "gpu-node-07", 3)
    # torchrun's [rank3] is a global rank, not srun task 3 (one task per node): no guess.
    got = diagnose_text(log.replace("3: ", "[rank3]: "))
    assert (got.cause, got.blamed_node) == ("cuda_fault", None)


def test_peer_address_resolves_through_the_logs_own_nccl_interface_lines():
    log = (
        "node-a:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node-b:200:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.2<0>\n"
        "node-a:100:150 [0] misc/socket.cc:518 NCCL WARN Net : Call to recv from"
        " 10.0.0.2<58355> failed : Connection reset by peer\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node) == ("nccl_remote", "node-b")
    ib = log + (
        "node-a:100:150 [0] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer"
        " 10.0.0.2<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
    )
    got = diagnose_text(ib)
    assert (got.cause, got.blamed_node) == ("ib_link", "node-a")
    assert "completion error from peer 10.0.0.2 = node-b" in got.notes
    # An address no line of the log maps stays an address.
    got = diagnose_text(log.replace("OOB eth0:10.0.0.2<0>", "OOB eth0:10.0.0.9<0>"))
    assert got.blamed_node == "10.0.0.2"


def test_torchrun_failure_record_blames_the_failed_ranks_host():
    log = (
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2025-12-23_05:17:58\n"
        "  host      : yotta-B200-232\n"
        "  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -11 (pid: 3304209)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 11 (SIGSEGV) received by PID 3304209\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("native_crash", "yotta-B200-232", 0)


def test_what_one_diagnosis_parses_is_capped_and_the_end_is_still_read(monkeypatch):
    from webapp.failures.diagnosis import scan

    monkeypatch.setattr(scan, "MAX_PARSED_LINES", 50)
    noise = "".join(f"step {i}: warning: retrying after error {i}\n" for i in range(2000))
    middle = "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    end = "srun: error: gpu-node-07: task 0: Exited with exit code 1\n"
    # The failure at the end of the log: read, though the caps were reached long before.
    got = diagnose_text(noise + middle + end)
    assert got.cause == "cuda_fault"
    assert any("not parsed" in n for n in got.notes), got.notes
    assert got.lines_scanned == 2002
    # Past the caps and before the last 256 KiB, a line is counted, not parsed.
    got = diagnose_text(noise + middle + noise * 5)
    assert (got.cause, got.lines_scanned) == ("unknown", 2000 * 6 + 1)
    # A second input read after the caps are spent is still read where it ends.
    kernel = "gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, fallen off the bus\n"
    got = diagnose_text(noise, kernel_log=kernel)
    assert (got.cause, got.blamed_node) == ("gpu_off_bus", "gpu-node-07")


def test_a_line_is_cut_at_max_line_bytes():
    from webapp.failures.diagnosis.scan import MAX_LINE_BYTES

    # A phrase past the cut is not read: what a line can cost is bounded.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
    got = diagnose_text("x" * MAX_LINE_BYTES + oom + "\n")
    assert got.cause == "unknown"
    got = diagnose_text(oom + "x" * MAX_LINE_BYTES + "\n")
    assert got.cause == "gpu_oom"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # Each launcher's or shell's verdict names the signal; the exit table gives its meaning.
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0"
            " (pid: 2410412) of binary: /opt/conda/bin/python",
            "host_oom",
        ),
        (
            "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python', 'main.py']"
            " exits with return code = -9",
            "host_oom",
        ),
        (
            "mpirun noticed that process rank 0 with PID 21183 on node host01 exited on signal 9"
            " (Killed).",
            "host_oom",
        ),
        ("Exception: process 1 terminated with signal SIGKILL", "host_oom"),
        (
            "model_train_demo.sh: line 5:  1921 Killed                  hector feature_stats",
            "host_oom",
        ),
        ("Killed", "host_oom"),
        # bash in a zh_CN locale (danijar/dreamerv3#203): the prefilter reads it too.
        ("Writing metrics: /home/u/logdir/scores.jsonl\n已杀死", "host_oom"),
        ("srun: error: gpu-3: task 0: Exited with exit code 137", "host_oom"),
        (
            "mpirun noticed that process rank 0 with PID 6 on node fl98 exited on signal 11"
            " (Segmentation fault)",
            "native_crash",
        ),
        ("  exitcode  : -6 (pid: 3304209)", "native_crash"),
        # srun's task is the training process: its SIGBUS is its crash (exits.py SIGNALS).
        ("srun: error: node-05: task 40: Bus error", "native_crash"),
        # The process's own report of the signal it caught is a native crash, SIGBUS included.
        (
            "[09677202c889:5283 :0:5704] Caught signal 7 (Bus error: nonexistent physical address)",
            "native_crash",
        ),
        # SIGTERM is what launchers send the surviving ranks: no verdict.
        ("Terminated", "unknown"),
        ("srun: error: gpu-3: task 0: Exited with exit code 1", "unknown"),
        # The shells' own wordings: fish's job report and zsh's.
        ("fish: Job 1, 'python3 train.py' terminated by signal SIGKILL (Forced quit)", "host_oom"),
        ("zsh: killed     python3 train.py", "host_oom"),
        ("zsh: segmentation fault  python3 train.py", "native_crash"),
        # A launcher re-raising its child's end: a negative status is a signal.
        (
            "subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero"
            " exit status -11.",
            "native_crash",
        ),
    ],
)
def test_exit_verdicts_decide_through_the_exit_table(line, cause):
    got = diagnose_text(line + "\n")
    assert got.cause == cause, (line, got.rule_id)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        # The scheduler's record of the job's end, as scontrol, seff, sacct and the job mail
        # print it: a memory-limit kill is host_oom, not cancelled.
        ("JobId=4242 JobName=train\n   JobState=OUT_OF_MEMORY Reason=OutOfMemory\n", "host_oom"),
        ("State: OUT_OF_MEMORY (exit code 0)\n", "host_oom"),
        (
            "       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode\n"
            "4242              train        gpu    default          8 OUT_OF_ME+    0:125\n",
            "host_oom",
        ),
        ("Slurm Job_id=4242 Name=train Failed, Run time 00:10:02, OUT_OF_MEMORY\n", "host_oom"),
        ("   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)\n", "timeout"),
        (
            "4242              train        gpu    default          8  PREEMPTED      0:0\n",
            "preempted",
        ),
        ("4242.batch   batch      default          8 CANCELLED by 1000    0:15\n", "cancelled"),
        # FAILED and COMPLETED say nothing of the cause.
        (
            "4242              train        gpu    default          8     FAILED      1:0\n",
            "unknown",
        ),
    ],
)
def test_scheduler_job_states_decide_through_the_state_table(text, cause):
    got = diagnose_text(text)
    assert got.cause == cause, (text, got.rule_id)
    if cause in ("timeout", "preempted", "cancelled"):
        assert got.blamed_node is None


def test_a_jvm_exception_chain_is_read_from_its_last_cause():
    # The JVM prints the wrapper first and its causes after it: the last "Caused by:" is the
    # root, the class missing from the job's classpath (a script error), not Spark's abort.
    got = diagnose_text(
        'Exception in thread "main" org.apache.spark.SparkException: Job aborted due to stage'
        " failure: Task 3 in stage 3.0 failed 4 times\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages"
        "(DAGScheduler.scala:1889)\n"
        "Caused by: org.apache.spark.SparkException: Task failed while writing rows\n"
        "\tat org.apache.spark.sql.execution.datasources.FileFormatWriter$.executeTask"
        "(FileFormatWriter.scala:285)\n"
        "Caused by: java.lang.ClassNotFoundException: com.example.etl.RowMapper\n"
        "\tat java.net.URLClassLoader.findClass(URLClassLoader.java:381)\n"
    )
    assert (got.cause, got.detail) == ("user_exception", "ClassNotFoundException")
    assert got.evidence[0].text.startswith("Caused by: java.lang.ClassNotFoundException")
    # A Python chain keeps its order: the first exception is the cause.
    got = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 9, in <module>\n'
        "KeyError: 'labels'\n"
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 9, in f\n'
        "RuntimeError: cleanup failed\n"
    )
    assert got.detail == "KeyError"


def test_root_cause_outranks_the_frame_that_reported_it():
    # An errno under torch.load, then the framework's own crash: the storage error decides.
    got = diagnose_text(
        "RuntimeError: read(): fd 33 failed with Stale file handle\n"
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  owning_ptr == NullType::singleton() INTERNAL ASSERT FAILED\n"
    )
    assert got.cause == "filesystem"
    # A name-resolution error raised again inside botocore's frames is the storage endpoint's.
    chained = (
        "socket.gaierror: [Errno -2] Name or service not known\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.7/site-packages/botocore/httpsession.py", line 412, in send\n'
    )
    assert diagnose_text(chained).cause == "object_storage"
    assert diagnose_text(chained.replace("botocore", "requests")).cause == "aux_connection"
    # torch.load's reader failing, whatever its (here cut) message, is a model loading error.
    load = (
        "Traceback (most recent call last):\n"
        '  File "tools/test.py", line 99, in main\n'
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 600, in load\n'
        "    with _open_zipfile_reader(opened_file) as opened_zipfile:\n"
        "RuntimeError: PytorchStreamReader\n"
    )
    assert diagnose_text(load).cause == "model_loading"
    assert diagnose_text(load.replace("in load", "in save")).cause == "framework_exception"


def test_a_loss_scale_halved_below_one_at_every_step_is_divergence():
    scale = 2.0
    lines = []
    for _ in range(12):
        scale /= 2
        lines.append(
            f"Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to {scale!r}"
        )
    assert diagnose_text("\n".join(lines) + "\n").cause == "loss_nan"
    # Overflows that leave the scale at 1 or more are the scaler doing its job.
    assert diagnose_text("\n".join(lines[:1]) + "\n").cause == "unknown"


def test_a_foreign_host_in_a_window_is_replaced_by_the_node_that_shipped_it():
    import io

    from webapp.failures.diagnosis import LogStream, diagnose_streams

    line = (
        b"victim-node-77:81234:81301 [2] transport/net_ib.cc:1712 NCCL WARN NET/IB : Got"
        b" completion from peer 10.20.1.17<59412> with status=12 opcode=0 len=0\n"
    )
    window = LogStream("gpu-a-002:/home/u/job.out:1", io.BytesIO(line), False, "gpu-a-002")
    got = diagnose_streams([window], job_nodes=["gpu-a-001", "gpu-a-002"])
    assert (got.cause, got.blamed_node, got.blame_evidence) == ("ib_link", "gpu-a-002", "job_log")


def test_blame_evidence_says_which_source_the_blamed_node_rests_on():
    import io

    from webapp.failures.diagnosis import LogStream, diagnose_streams

    node_fail = (
        b"2024-05-07T03:12:44 node-07 slurmstepd: error: *** JOB 9 ON node-07 CANCELLED AT"
        b" 2024-05-07T03:12:44 DUE TO NODE FAILURE ***\n"
    )
    # The scheduler's record (a stream that may carry kernel evidence, as the live path's
    # scheduler stream does) ...
    got = diagnose_streams([LogStream("scheduler", io.BytesIO(node_fail), True)])
    assert (got.cause, got.blamed_node, got.blame_evidence) == ("node_lost", "node-07", "scheduler")
    # ... and the same words printed in a job's own log window.
    got = diagnose_streams([LogStream("node-07:/job.out:1", io.BytesIO(node_fail), False)])
    assert (got.blamed_node, got.blame_evidence) == ("node-07", "job_log")


def _torchrun_record(index: int, time: str, host: str, rank: int, exitcode: int) -> str:
    signals = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV"}
    return (
        f"[{index}]:\n"
        f"  time      : {time}\n"
        f"  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {rank % 8})\n"
        f"  exitcode  : {exitcode} (pid: {4000 + rank})\n"
        "  error_file: <N/A>\n"
        f"  traceback : Signal {-exitcode} ({signals[exitcode]}) received by PID {4000 + rank}\n"
    )


def test_torchrun_root_cause_block_names_the_rank_that_failed_first():
    # torchrun prints the other failures first and the first observed one last.
    block = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "pretrain_gpt.py FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n"
        + _torchrun_record(1, "2025-03-01_10:00:09", "gpu-a", 3, -6)
        + "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        + _torchrun_record(0, "2025-03-01_10:00:05", "gpu-a", 1, -11)
        + "============================================================\n"
    )
    got = diagnose_text(block)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("native_crash", "gpu-a", 1)
    # Two nodes' agents each print a block; the one pasted first failed later.
    other = (
        "Root Cause (first observed failure):\n"
        + _torchrun_record(0, "2025-03-01_10:00:12", "gpu-b", 9, -11)
        + "============================================================\n"
    )
    got = diagnose_text(other + block)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("native_crash", "gpu-a", 1)
    # Blamed only within the job's nodes.
    got = diagnose_text(other + block, job_nodes=["gpu-b", "gpu-c"])
    assert got.blamed_node != "gpu-a"


def test_srun_launch_lines_map_tasks_to_hosts():
    log = (
        "srun: launching StepId=4296558.0 on host gpu-01, 4 tasks: [0-3]\n"
        "srun: launching StepId=4296558.0 on host gpu-02, 4 tasks: [4-7]\n"
        "srun: Node gpu-02, 4 tasks started\n"
        "5: Traceback (most recent call last):\n"
        '5:   File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py",'
        " line 1501, in _call_impl\n"
        "5: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("cuda_fault", "gpu-02", 5)
    one = "srun: launching StepId=6.0 on host 54ccd73f040a, 1 tasks: 0\n0: Segmentation fault\n"
    assert diagnose_text(one).blamed_node == "54ccd73f040a"


def test_nccl_init_lines_map_ranks_to_hosts():
    log = (
        "gpu-a:100:100 [1] NCCL INFO comm 0x5e1 rank 1 nranks 16 cudaDev 1 nvmlDev 1"
        " busId 1b000 commId 0x9f - Init COMPLETE\n"
        "gpu-b:200:200 [1] NCCL INFO comm 0x7a2 rank 9 nRanks 16 nNodes 2 localRanks 8"
        " localRank 1 MNNVL 0\n"
        "[rank9]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
        " GPU 1 has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("gpu_oom", "gpu-b", 9)


def test_a_divergence_that_plateaus_is_still_read_as_one():
    # A healthy stretch (s21-gpt2's own log, tests/data/loss_curves), then the loss jumps and
    # hovers there for 36 printed values, as nanoGPT#303 describes ("increased until reaching
    # ~7.81 and it's been hovering within ~0.5 of that value for around 65 steps"): the
    # baseline must still be the healthy run's, not the plateau's.
    healthy = (DATA / "loss_curves" / "healthy_s21gpt2_late.log").read_text().splitlines()
    plateau = [
        f"step {4998 + i}, loss: {0.091 + 0.004 * (i % 5):.6f}, norm: 3.1, lr: 6.0000e-05"
        for i in range(36)
    ]
    got = diagnose_text("\n".join(healthy + plateau) + "\n")
    assert (got.cause, got.rule_id) == ("loss_nan", "loss-curve")
    # The healthy stretch alone is not a divergence at any point it could have ended.
    for end in range(1, len(healthy) + 1):
        assert diagnose_text("\n".join(healthy[:end]) + "\n").cause == "unknown", end


# A traceback a structured logger or a job API printed as one escaped string (a JSON log's
# "exc_info", Databricks' run_output "error_trace", Ray's task error): its frames and final
# exception are read as if printed one per line.
def test_a_traceback_flattened_into_one_line_is_read_frame_by_frame():
    user = (
        '{"level": "error", "job": "pretrain", "error_trace": "Traceback (most recent call '
        'last):\\n  File \\"/workspace/train.py\\", line 88, in <module>\\n    main()\\n  File '
        '\\"/workspace/train.py\\", line 61, in main\\n    cfg = load(args.config)\\nKeyError: '
        "'model'\\n\"}"
    )
    got = diagnose_text(user + "\n")
    assert (got.cause, got.detail) == ("user_exception", "KeyError")
    library = (
        "2024-05-01 12:00:00,001 ERROR worker.py:88 -- Task failed: Traceback (most recent "
        'call last):\\n  File "/usr/local/lib/python3.10/site-packages/torch/nn/modules/'
        'module.py", line 1501, in _call_impl\\n    return forward_call(*args)\\nRuntimeError: '
        "shape mismatch: value tensor of shape [8] cannot be broadcast\\n"
    )
    got = diagnose_text(library + "\n")
    assert got.cause == "framework_exception"
    # A root cause inside it outranks the framework's frame, as on separate lines.
    storage = library.replace(
        "RuntimeError: shape mismatch: value tensor of shape [8] cannot be broadcast",
        "OSError: [Errno 28] No space left on device",
    )
    assert diagnose_text(storage + "\n").cause == "filesystem"
    # The line's host prefix stays the host of what is inside it.
    got = diagnose_text("gpu-07: " + library + "\n")
    assert (got.cause, got.blamed_node) == ("framework_exception", "gpu-07")


@pytest.mark.parametrize(
    "log, node",
    [
        # Open MPI's signal handler (opal/util/stacktrace.c), its "[host:pid]" prefix the node.
        (
            "[gpu-a:12345] *** Process received signal ***\n"
            "[gpu-a:12345] Signal: Segmentation fault (11)\n"
            "[gpu-a:12345] Signal code: Address not mapped (1)\n",
            "gpu-a",
        ),
        (
            "[gpu-b:999] *** Process received signal ***\n[gpu-b:999] Signal: Bus error (7)\n",
            "gpu-b",
        ),
        # UCX's "[host:pid:thread:tid]" (deepspeedai/DeepSpeed#2638).
        (
            "[node-3:1234:0:1299] Caught signal 11 (Segmentation fault: address not mapped to"
            " object at address 0x8)\n",
            "node-3",
        ),
        # abseil's failure signal handler (Ray, TensorFlow), under Ray's worker prefix.
        (
            "(RayWorkerVllm pid=7046, ip=10.0.0.3) *** SIGSEGV received at time=1712345678 on"
            " cpu 12 ***\n(RayWorkerVllm pid=7046, ip=10.0.0.3) PC: @     0x7f0a3c1e2b1c"
            "  (unknown)  ncclProxyService()\n",
            "10.0.0.3",
        ),
        ("*** SIGABRT received at time=1700000000 on cpu 3 ***\n", None),
        # glibc's malloc aborting on a corrupted heap (malloc/malloc.c malloc_printerr).
        (
            "*** Error in `python': double free or corruption (!prev): 0x000055d6c2a3e0b0 ***\n",
            None,
        ),
        ("free(): invalid pointer\n", None),
        ("malloc(): memory corruption\n", None),
    ],
)
def test_native_crash_reports_name_their_node(log, node):
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node) == ("native_crash", node)


@pytest.mark.parametrize(
    "log, node",
    [
        # A scheduler enforcing the job's memory limit: host_oom, not a cancellation.
        (
            "slurmstepd-gpu-05: error: Job 4242 exceeded memory limit (34359738368 >"
            " 32212254720), being killed\n",
            "gpu-05",
        ),
        ("slurmstepd: error: Exceeded job memory limit\n", None),
        ("=>> PBS: job killed: mem 33554432kb exceeded limit 16777216kb\n", None),
        ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.\n", None),
        # Horovod's runner: status 137 = 128 + SIGKILL, and its "[rank]<stderr>:" prefix.
        ("Process 1 exit with status code 137.\n", None),
        ("[1]<stderr>:Killed\n", None),
    ],
)
def test_scheduler_and_runner_memory_kills_are_host_oom(log, node):
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node) == ("host_oom", node)


def _megatron_line(it: int, scale: str, skipped: int, loss: str = "lm loss: 2.413E+00 | ") -> str:
    return (
        f" iteration {it:8d}/  500000 | consumed samples: {it * 512:9d} | elapsed time per"
        f" iteration (ms): 988.1 | learning rate: 2.871E-04 | global batch size:   512 | {loss}"
        f"loss scale: {scale} | number of skipped iterations: {skipped:3d} | number of nan"
        " iterations:   0 |\n"
    )


def test_every_iteration_skipped_at_the_minimum_loss_scale_is_divergence():
    # fp16 Megatron: an overflowing step is skipped and the scale halved, down to
    # --min-loss-scale (1.0), where it stays (megatron/core/optimizer/grad_scaler.py): every
    # iteration of every interval skipped there means the run no longer trains, NaN or not.
    healthy = "".join(_megatron_line(it, "65536.0", 0) for it in range(1000, 1100, 10))
    stuck = "".join(_megatron_line(it, "1.0", 10) for it in range(1100, 1160, 10))
    got = diagnose_text(healthy + stuck)
    assert (got.cause, got.rule_id) == ("loss_nan", "loss-curve")
    assert "skipped" in got.detail
    # Start-up: the scaler calibrates down from 2**32, skipping the first iterations
    # (NVIDIA/nccl#743's log: "loss scale: 8388608.0 | number of skipped iterations:  10").
    start = "".join(
        _megatron_line(it, f"{2.0 ** (32 - it // 10):.1f}", 10, loss="") for it in range(10, 80, 10)
    )
    assert diagnose_text(start).cause == "unknown"
    # A few skipped iterations among trained ones are the scaler doing its job.
    some = "".join(_megatron_line(it, "1.0", 3) for it in range(1100, 1160, 10))
    assert diagnose_text(healthy + some).cause == "unknown"


def test_the_ranks_verdicts_are_listed_first_failed_first():
    got = diagnose_paths(CORPUS / "native_crash_3_first_agent.log")
    (line,) = [n for n in got.notes if n.startswith("exit verdicts")]
    assert line.startswith(
        "exit verdicts, first failed first: rank 2 on gpu-a: segmentation fault; "
        "rank 3 on gpu-a: process aborted; rank 5 on gpu-a: process aborted; "
        "rank 9 on gpu-b: segmentation fault"
    ), line


def test_a_slurmstepd_line_without_a_node_takes_the_node_its_cancel_line_names():
    # Each node's slurmstepd prints "*** JOB n ON <its node> CANCELLED ***" after the kill it
    # made (coqui-ai/STT#2238).
    log = (
        "slurmstepd: error: Job 7518 exceeded memory limit (626359956 > 512000000), being killed\n"
        "slurmstepd: error: Exceeded job memory limit\n"
        "slurmstepd: error: *** JOB 7518 ON xantipa CANCELLED AT 2022-06-10T17:11:35 ***\n"
    )
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node) == ("host_oom", "xantipa")
    assert diagnose_text(log, job_nodes=["gpu-1"]).blamed_node == "gpu-1"


def test_mvapich_and_hydra_reports_name_rank_and_node():
    # MVAPICH2's handler "[host:mpi_rank_N][error_sighandler]" (lanl/MPI-Bash#14).
    got = diagnose_text(
        "[A-c7-023-14:mpi_rank_24][error_sighandler] Caught error: Segmentation fault (signal 11)\n"
    )
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("native_crash", "A-c7-023-14", 24)
    # MPICH's Hydra launcher: "<host>: rank 0 died from signal 9" (intel/pti-gpu#69 prints
    # its "rank 1 died from signal 15").
    got = diagnose_text("gpu-12: rank 3 died from signal 9\n")
    assert (got.cause, got.blamed_node) == ("host_oom", "gpu-12")


@pytest.mark.parametrize(
    "line",
    [
        # torch.save's zip writer on a full disk (h2oai/h2o-llmstudio#214, innnky/so-vits-svc#46,
        # pytorch/pytorch#156955).
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed"
        " writing file data/228: file write failed",
        "RuntimeError: [enforce fail at inline_container.cc:337] . unexpected pos 190007680 vs"
        " 190007572",
        "  what():  [enforce fail at inline_container.cc:659] . unexpected pos 64 vs 0",
    ],
)
def test_a_checkpoint_writer_failing_is_the_filesystem(line):
    log = (
        '  File "/usr/local/lib/python3.10/site-packages/torch/serialization.py", line 650,'
        " in _save\n    zip_file.write_record(name, storage.data_ptr(), num_bytes)\n" + line + "\n"
    )
    assert diagnose_text(log).cause == "filesystem"
