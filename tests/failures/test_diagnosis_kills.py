"""Kills, native crash reports and precedence: what a launcher, a scheduler, a shell or the dying
process itself prints about a rank's end, read as the cause it names, a cause before its
consequence whichever order the lines come in, and guesses that abstain. Plain functions over
text: no database or broker.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text

# glog's fatal CHECK under its own prefix (PaddlePaddle/Paddle#10830).
GLOG_CHECK = (
    "I0522 14:58:01.883574 32152 MultiGradientMachine.cpp:99] numLogicalDevices=1 numThreads=8\n"
    "F0522 14:58:03.803087 32152 Vector.h:139] Check failed: start + size <= "
    "static_cast<size_t>(getSize()) (482 vs. 474) \n"
    "*** Check failure stack trace: ***\n"
    "    @     0x7f374629b2ed  google::LogMessage::Fail()\n"
)
# Caffe's CUDA_CHECK: the CHECK names cudaErrorMemoryAllocation (2).
CAFFE_CUDA_OOM = (
    "F0101 00:00:00.000000  1234 syncedmem.cpp:56] Check failed: error == cudaSuccess "
    "(2 vs. 0)  out of memory\n"
    "*** Check failure stack trace: ***\n"
)
# abseil's failure signal handler under Ray's actor prefix and Ray's C++ logger prefix
# (flashserve/flash-linear-attention-npu#272).
RAY_ABSL_SEGV = (
    "(MegatronTrainRayActor pid=3848117) [2026-08-05 07:11:08,188 E 3848117 3848117] "
    "logging.cc:501: *** SIGSEGV received at time=1785913868 on cpu 169 *** "
    "[repeated 7x across cluster]\n"
)
# std::terminate whose what() wraps onto the next line (TuSimple/mx-maskrcnn#98).
TERMINATE_WRAPPED_OOM = (
    "terminate called after throwing an instance of 'dmlc::Error'\n"
    "  what():  [10:44:35] src/engine/./threaded_engine.h:359: [10:44:35] "
    "src/storage/./pooled_storage_manager.h:107: cudaMalloc fail\n"
    "ed: out of memory\n"
)
TERMINATE_OTHER = (
    "terminate called after throwing an instance of 'dmlc::Error'\n"
    "  what():  [10:44:35] src/operator/tensor/matrix_op-inl.h:217: Check shape mismatch\n"
)
# accelerate re-raising a Windows trainer's crash status 0xC0000005 (bmaltais/kohya_ss#2556).
ACCELERATE_ACCESS_VIOLATION = (
    "Traceback (most recent call last):\n"
    '  File "C:\\kohya\\venv\\lib\\site-packages\\accelerate\\commands\\launch.py", line 637, '
    "in simple_launcher\n"
    "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
    "subprocess.CalledProcessError: Command '['C:\\\\kohya\\\\venv\\\\Scripts\\\\python.exe', "
    "'sdxl_train_network.py']' returned non-zero exit status 3221225477.\n"
)
# Ray's report that an actor's worker died, with the causes it cannot tell apart
# (hkust-nlp/simpleRL-reason#98).
RAY_ACTOR_DIED = (
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
    "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. "
    "There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer "
    "due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed "
    "unexpectedly due to SIGSEGV or other unexpected errors.\n"
    "Traceback (most recent call last):\n"
    '  File "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_1/verl/single_'
    'controller/ray/base.py", line 42, in func\n'
    "    output = ray.get(output)\n"
    "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
)
# faulthandler's stack without its "Fatal Python error" header (state-spaces/mamba#725).
FAULTHANDLER_STACK = (
    "Current thread 0x00007d28af644000 (most recent call first):\n"
    '  File "/env/lib/python3.10/site-packages/torch/autograd/function.py", line 575 in apply\n'
)

OOM_KILL = (
    "[Mon Mar  4 10:00:01 2024] Out of memory: Killed process 4242 (python) "
    "total-vm:123456kB, anon-rss:120000kB\n"
)
TORCHRUN_KILLED = (
    "E0304 10:00:05.000000 1 torch/distributed/elastic/multiprocessing/api.py:882] failed "
    "(exitcode: -9) local_rank: 0 (pid: 4242) of binary: /usr/bin/python\n"
)
UCX_SEGV = (
    "[gpu-7:4242:0:4250] Caught signal 11 (Segmentation fault: address not mapped to object "
    "at address 0x8)\n"
)
TORCHRUN_ABORTED = "  exitcode  : -6 (pid: 4242)\n"
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 1234 ON gpu-7 CANCELLED AT 2024-03-04T10:00:00 DUE TO TIME "
    "LIMIT ***\n"
)
SRUN_KILLED = "srun: error: gpu-7: task 0: Killed\n"
DS_KILLING = (
    "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80\n"
)
DS_SEGV = (
    "[2023-04-07 13:09:33,301] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
    "'-u', 'train.py', '--local_rank=0'] exits with return code = -11\n"
)
USER_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    '    x = int("a")\n'
    "ValueError: invalid literal for int() with base 10: 'a'\n"
)
WATCHDOG = (
    "[rank0]:[E304 10:00:00.000000 1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600058 milliseconds before timing out.\n"
)


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (GLOG_CHECK, "native_crash"),
        (CAFFE_CUDA_OOM, "gpu_oom"),
        (RAY_ABSL_SEGV, "native_crash"),
        (TERMINATE_WRAPPED_OOM, "gpu_oom"),
        (TERMINATE_OTHER, "native_crash"),
        (ACCELERATE_ACCESS_VIOLATION, "native_crash"),
        ("Process finished with exit code -1073741819 (0xC0000005)\n", "native_crash"),
        (FAULTHANDLER_STACK, "native_crash"),
    ],
    ids=[
        "glog-check",
        "caffe-cuda-check-oom",
        "absl-segv-under-ray",
        "terminate-wrapped-what-oom",
        "terminate-any-type",
        "windows-access-violation",
        "windows-signed-status",
        "faulthandler-headerless",
    ],
)
def test_native_crash_reports_are_read_by_what_they_report(log: str, cause: str) -> None:
    assert diagnose_text(log).cause == cause


def test_ray_reporting_a_dead_actor_names_no_cause_of_its_own() -> None:
    # Ray lists the OOM killer, ray stop and a segfault as possibilities: a guess from it (or
    # the user's frame above it) would be acted on; unknown is the honest answer.
    diagnosis = diagnose_text(RAY_ACTOR_DIED)
    assert (diagnosis.cause, diagnosis.confidence) == ("unknown", 0.0)


def test_a_plain_exit_status_is_no_signal() -> None:
    assert diagnose_text("Process finished with exit code 1\n").cause == "unknown"


# Each pair in both orders: the cause wins over its consequence wherever it is printed.
PAIRS = [
    ("oom-kill-over-launcher-sigkill", OOM_KILL, TORCHRUN_KILLED, "host_oom"),
    ("crash-report-over-launcher-sigabrt", UCX_SEGV, TORCHRUN_ABORTED, "native_crash"),
    ("time-limit-over-srun-killed", TIME_LIMIT, SRUN_KILLED, "timeout"),
    ("exception-over-silent-kill-guess", USER_ERROR, DS_KILLING, "user_exception"),
    ("verdict-over-silent-kill-guess", DS_SEGV, DS_KILLING, "native_crash"),
    ("watchdog-over-faulthandler-stack", WATCHDOG, FAULTHANDLER_STACK, "nccl_timeout"),
    ("oom-kill-over-ray-actor-died", OOM_KILL, RAY_ACTOR_DIED, "host_oom"),
    (
        "cuda-check-over-its-stack",
        CAFFE_CUDA_OOM,
        "*** Check failure stack trace: ***\n",
        "gpu_oom",
    ),
]


@pytest.mark.parametrize("order", ["cause-first", "consequence-first"])
@pytest.mark.parametrize(
    ("cause_lines", "consequence", "cause"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS]
)
def test_the_cause_outranks_its_consequence_in_either_order(
    cause_lines: str, consequence: str, cause: str, order: str
) -> None:
    log = cause_lines + consequence if order == "cause-first" else consequence + cause_lines
    assert diagnose_text(log).cause == cause


def test_a_crash_report_blames_the_host_it_names_over_the_launchers_verdict() -> None:
    for log in (UCX_SEGV + TORCHRUN_ABORTED, TORCHRUN_ABORTED + UCX_SEGV):
        assert diagnose_text(log).blamed_node == "gpu-7"


COMMAND_NOT_FOUND = "/var/spool/slurmd/job1/slurm_script: line 5: nvidia-smi: command not found\n"
BASH_KILLED = "/var/spool/slurmd/job1/slurm_script: line 9:  4242 Killed    python train.py\n"
STEP_CANCELLED = (
    "slurmstepd: error: *** STEP 1234.0 ON gpu-7 CANCELLED AT 2024-03-04T10:00:00 ***\n"
)
TASK_EXIT_1 = "srun: error: gpu-7: task 0: Exited with exit code 1\n"


@pytest.mark.parametrize("order", ["guess-first", "guess-last"])
@pytest.mark.parametrize(
    ("other", "cause"),
    [(WATCHDOG, "nccl_timeout"), (BASH_KILLED, "host_oom")],
    ids=["hang", "kill"],
)
def test_command_not_found_decides_only_a_log_with_nothing_else(
    other: str, cause: str, order: str
) -> None:
    log = COMMAND_NOT_FOUND + other if order == "guess-first" else other + COMMAND_NOT_FOUND
    assert diagnose_text(log).cause == cause
    assert diagnose_text(COMMAND_NOT_FOUND).cause == "user_exception"


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        # srun cancels the step after a task failed: the task's end is the failure.
        (TASK_EXIT_1 + STEP_CANCELLED, "unknown"),
        (SRUN_KILLED + STEP_CANCELLED, "host_oom"),
        # A task reported Killed after the cancel died of the cancel
        # (ascii-supply-networks/dagster-slurm#72).
        (STEP_CANCELLED + SRUN_KILLED, "cancelled"),
        (STEP_CANCELLED, "cancelled"),
    ],
    ids=["exit-1-then-cancel", "killed-then-cancel", "cancel-then-killed", "cancel-alone"],
)
def test_a_step_cancel_after_a_failed_task_is_its_consequence(log: str, cause: str) -> None:
    assert diagnose_text(log).cause == cause


def test_a_step_cancel_set_aside_still_names_the_node_of_a_memory_kill() -> None:
    log = (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks "
        "have been OOM Killed.\n"
        "srun: error: nid001277: tasks 1-3: Out Of Memory\n"
        "slurmstepd: error: *** STEP 440575.0 ON nid001277 CANCELLED AT 2023-12-05T07:16:01 ***\n"
    )
    diagnosis = diagnose_text(log)
    assert (diagnosis.cause, diagnosis.blamed_node) == ("host_oom", "nid001277")


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("srun: error: gpu-7: task 3: Floating point exception\n", "native_crash"),
        ("[1]    12345 killed     python train.py\n", "host_oom"),
        ("[1]  + 12345 abort      python train.py\n", "native_crash"),
        (
            "#5  <signal handler called>\n#6  0x00007f2a in ncclProxyService () from libnccl.so.2\n",
            "native_crash",
        ),
        (
            "* thread #1, queue = 'com.apple.main-thread', stop reason = EXC_BAD_ACCESS (code=1, "
            "address=0x0)\n",
            "native_crash",
        ),
        # A backtrace with no signal in it is as often a hung process a debugger attached to.
        (
            "#0  0x00007f2a in pthread_cond_wait () from libpthread.so.0\n"
            "#1  0x00007f2b in ncclProxyService () from libnccl.so.2\n",
            "unknown",
        ),
        # torchrun's agent told to stop from outside: whoever stopped it says why.
        (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got "
            "signal: 15\n",
            "unknown",
        ),
        (
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got "
            "signal: 15\n" + TIME_LIMIT,
            "timeout",
        ),
    ],
    ids=[
        "srun-fpe",
        "zsh-job-killed",
        "zsh-job-abort",
        "gdb-signal-frame",
        "lldb-bad-access",
        "gdb-frames-no-signal",
        "agent-sigterm-alone",
        "agent-sigterm-time-limit",
    ],
)
def test_launcher_shell_and_debugger_reports_in_each_of_their_words(log: str, cause: str) -> None:
    assert diagnose_text(log).cause == cause


HYDRA_BOX = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 9665 RUNNING AT gpu-12\n"
    "=   EXIT CODE: 9\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "===================================================================================\n"
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
)


def test_mpich_hydra_blames_the_host_its_box_names_within_the_job() -> None:
    assert diagnose_text(HYDRA_BOX, job_nodes=["gpu-11", "gpu-12"]).blamed_node == "gpu-12"
    # A host the job does not hold is never blamed, whatever the job printed.
    assert diagnose_text(HYDRA_BOX, job_nodes=["gpu-11"]).blamed_node != "gpu-12"


SRUN_BUS_ERROR = "srun: error: node-05: task 40: Bus error\n"
EIO = "OSError: [Errno 5] Input/output error: '/mnt/lustre/shards/shard-00042.bin'\n"


def test_a_bus_error_of_a_task_is_its_crash_unless_the_filesystem_says_so() -> None:
    assert diagnose_text(SRUN_BUS_ERROR).cause == "native_crash"
    for log in (SRUN_BUS_ERROR + EIO, EIO + SRUN_BUS_ERROR):
        assert diagnose_text(log).cause == "filesystem"


TERMINATE_NCCL = (
    "terminate called after throwing an instance of 'std::runtime_error'\n"
    "  what():  NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, unhandled "
    "system error, NCCL version 2.4.8\n"
)
PYTHON_CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.2 GiB is free.\n"
)


def test_an_abort_is_read_by_its_what_even_where_that_is_a_consequence() -> None:
    # The what() names NCCL's error: the abort is that error, not a native bug of its own.
    assert diagnose_text(TERMINATE_NCCL).cause == "nccl_remote"
    # A CUDA OOM beside it is the cause of both, printed before or after (ranks interleave).
    for log in (PYTHON_CUDA_OOM + TERMINATE_NCCL, TERMINATE_NCCL + PYTHON_CUDA_OOM):
        assert diagnose_text(log).cause == "gpu_oom"


def test_rays_old_memory_monitor_is_the_hosts_memory_not_the_gpus() -> None:
    log = (
        "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node "
        "eric-ThinkPad is used (11.8 / 12.3 GB). The top 5 memory consumers are:\n"
    )
    assert diagnose_text(log).cause == "host_oom"


WORKER_BUS_ERROR = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).\n"
)
FATAL_BUS_ERROR = "Fatal Python error: Bus error\n\n"


def test_a_dataloader_workers_crash_report_is_the_workers_not_a_native_crash() -> None:
    # rwth-i6/returnn#1648: the worker's handler, then faulthandler in the same worker.
    assert diagnose_text(WORKER_BUS_ERROR + FATAL_BUS_ERROR).cause == "dataloader_killed"
    assert diagnose_text(FATAL_BUS_ERROR).cause == "native_crash"


def test_horovod_shut_down_after_another_rank_failed_names_no_cause_of_its_own() -> None:
    log = (
        "[1,1]<stderr>:Traceback (most recent call last):\n"
        '[1,1]<stderr>:  File "train.py", line 10, in <module>\n'
        "[1,1]<stderr>:    hvd.allreduce(x)\n"
        "[1,1]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut "
        "down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
        "allgather or broadcast a tensor after one of the ranks finished execution.\n"
    )
    assert diagnose_text(log).cause == "unknown"
    assert diagnose_text(log + BASH_KILLED).cause == "host_oom"


@pytest.mark.parametrize(
    "log",
    [
        'Thread 1 "python" received signal SIGILL, Illegal instruction.\n',
        "Bus error\n",
        "Illegal instruction\n",
        "Floating point exception\n",
    ],
)
def test_a_debuggers_or_shells_bare_word_for_a_fatal_signal_is_a_native_crash(log: str) -> None:
    assert diagnose_text(log).cause == "native_crash"


AGENT_SIGTERM = (
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15\n"
)
RANK_SIGKILL = "  exitcode  : -9 (pid: 4243)\n"


def test_a_rank_killed_after_the_job_was_stopped_from_outside_is_no_oom_guess() -> None:
    assert diagnose_text(RANK_SIGKILL).cause == "host_oom"
    for log in (AGENT_SIGTERM + RANK_SIGKILL, RANK_SIGKILL + AGENT_SIGTERM):
        assert diagnose_text(log).cause == "unknown"
    assert diagnose_text("srun: forcing job termination\n" + SRUN_KILLED).cause == "unknown"
    # The OOM killer's own line still says what killed it.
    assert diagnose_text(AGENT_SIGTERM + RANK_SIGKILL + OOM_KILL).cause == "host_oom"


def test_python_failing_to_start_is_the_jobs_environment_not_a_native_crash() -> None:
    # guigolab/ggsashimi#49: PYTHONHOME of another Python after "module load python".
    log = (
        "Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem "
        "encoding\n"
        "Python runtime state: core initialized\n"
        "ModuleNotFoundError: No module named 'encodings'\n\n"
        "Current thread 0x00002ae45d1c7740 (most recent call first):\n"
        "<no Python frame>\n"
        "Aborted (core dumped)\n"
    )
    assert diagnose_text(log).cause == "user_exception"
    assert diagnose_text("Fatal Python error: Segmentation fault\n").cause == "native_crash"


def test_pdsh_blames_the_remote_host_its_report_names() -> None:
    # DeepSpeed's multi-node runner over pdsh: the remote rank's shell was SIGKILLed.
    log = "pdsh@gpu-1: gpu-2: ssh exited with exit code 137\n"
    diagnosis = diagnose_text(log, job_nodes=["gpu-1", "gpu-2"])
    assert (diagnosis.cause, diagnosis.blamed_node) == ("host_oom", "gpu-2")


def test_a_crash_under_sagemakers_mpirun_tag_blames_the_host_in_the_tag() -> None:
    log = "[1,mpirank:3,algo-2]<stderr>:Segmentation fault (core dumped)\n"
    diagnosis = diagnose_text(log, job_nodes=["algo-1", "algo-2"])
    assert (diagnosis.cause, diagnosis.blamed_node, diagnosis.blamed_rank) == (
        "native_crash",
        "algo-2",
        3,
    )
