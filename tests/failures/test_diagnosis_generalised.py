"""Families the held-out batches missed, read by what they are rather than by a phrase seen once:
a DataLoader worker the OOM killer chose, NCCL watchdog timeouts in the other forms torch prints,
a launcher's kill cut before its exit code, MPI launchers' prefixes as blame, object-store
reads that fail under a data pipeline, a library's own dataset loader. Plain functions over
text: no database or broker.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text

WORKER_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1133,'
    " in _try_get_data\n"
    "    data = self._data_queue.get(timeout=timeout)\n"
    "RuntimeError: DataLoader worker (pid 4121) is killed by signal: Killed.\n"
    "Memory cgroup out of memory: Killed process 4121 (python) total-vm:9119556kB, "
    "anon-rss:6038204kB, file-rss:80652kB, shmem-rss:16kB, UID:0 pgtables:13432kB "
    "oom_score_adj:0\n"
)
MAIN_OOM = WORKER_OOM.replace("Killed process 4121", "Killed process 4000")
# The node-wide OOM killer choosing the worker: the node ran out of memory.
NODE_OOM = WORKER_OOM.replace(
    "Memory cgroup out of memory:", "May 07 03:09:12 node-04 kernel: Out of memory:"
)

WATCHDOG_CUT = (
    " 1%|▏         | 24/1752 [01:08<1:22:56,  2.88s/it][rank2]:[E1203 10:02:11.406 "
    "ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operati\n"
)
DIST_BACKEND_TIMEOUT = (
    "[rank3]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3. "
    "Original reason for failure was: [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600058 milliseconds before timing out.\n"
)

HYDRA_KILLED = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 5121 RUNNING AT gpu-03\n"
    "=   EXIT CODE: 9\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    "===================================================================================\n"
)
# The DeepSpeed launcher's handler, the log cut before the return code it prints last.
DEEPSPEED_CUT = (
    "[2024-03-01 10:00:01,100] [INFO] [utils.py:830:see_memory_usage] CPU Virtual Memory:  "
    "used = 120.43 GB, percent = 95.6%\n"
    "[2024-03-01 10:00:40,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80\n"
    "[2024-03-01 10:00:40,220] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python3', "
    "'-u', 'train.py', '--local_rank=0', '--deepspeed', 'ds.json'\n"
)
# The same handler after a rank's own exception: the exception decides.
DEEPSPEED_AFTER_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 12, in <module>\n'
    "    cfg = json.load(open(args.config))['model']\n"
    "KeyError: 'model'\n" + DEEPSPEED_CUT
)

# A library's own dataset loader refusing the data (its frames under a datasets package).
LIBRARY_DATASET = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/main.py", line 8, in <module>\n'
    "    ds = CaptionDataset('./data/train.jsonl')\n"
    '  File "/opt/conda/lib/python3.10/site-packages/vlkit/datasets/caption.py", line 51, in'
    " __init__\n"
    "    raise ValueError(f'{path}: every record needs an image and a caption')\n"
    "ValueError: ./data/train.jsonl: every record needs an image and a caption\n"
)
# A shard streamed from a store through webdataset's pipe, the command wrapped by the thread.
SHARD_FROM_STORE = (
    "Exception: (\"(('aws s3 cp s3://corpus-bucket/shards/train-000117.tar -',), {'shell':\n"
    " True, 'bufsize': 8192}): exit 1 (read) {'rank': 3, 'worker_id': 1}\", "
    "<webdataset.gopen.Pipe object at 0x7fce1cc86e80>)\n"
)
SHARD_FROM_DISK = SHARD_FROM_STORE.replace(
    "aws s3 cp s3://corpus-bucket/shards/train-000117.tar -", "cat /scratch/shards/train-000117.tar"
)

# A trainer library's data package (llamafactory/data/), not a datasets one.
LIBRARY_DATA = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 20, in <module>\n'
    "    run_exp()\n"
    '  File "/opt/conda/lib/python3.10/site-packages/llamafactory/data/loader.py", line 251, in'
    " get_dataset\n"
    "    raise ValueError('Cannot find valid samples, check `data/README.md` for the format.')\n"
    "ValueError: Cannot find valid samples, check `data/README.md` for the format.\n"
)
# s3fs raising its store's answer as an OSError with an errno.
S3FS_ERRNO = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 88, in <module>\n'
    "    fs.put(local, 's3://ckpt-bucket/run7/step-4000.pt')\n"
    '  File "/opt/conda/lib/python3.10/site-packages/s3fs/core.py", line 140, in _error_wrapper\n'
    "    raise err\n"
    "OSError: [Errno 5] An error occurred (SlowDown) when calling the PutObject operation: "
    "Please reduce your request rate.\n"
)


@pytest.mark.parametrize(
    ("want", "log"),
    [
        ("dataloader_killed", WORKER_OOM),
        ("host_oom", MAIN_OOM),
        ("host_oom", NODE_OOM),
        ("nccl_timeout", WATCHDOG_CUT),
        ("nccl_timeout", DIST_BACKEND_TIMEOUT),
        ("host_oom", HYDRA_KILLED),
        ("host_oom", DEEPSPEED_CUT),
        ("user_exception", DEEPSPEED_AFTER_ERROR),
        ("dataset_loading", LIBRARY_DATASET),
        ("object_storage", SHARD_FROM_STORE),
        ("dataset_loading", SHARD_FROM_DISK),
        ("dataset_loading", LIBRARY_DATA),
        ("object_storage", S3FS_ERRNO),
    ],
)
def test_family_read_as_its_cause(want: str, log: str) -> None:
    got = diagnose_text(log)
    assert got.cause == want, (got.cause, got.rule_id, got.detail)


# Open MPI's --tag-output prefix ("[job,rank]<stderr>:") before its crash handler's "[host:pid]".
OPEN_MPI_CRASH = (
    "[1,6]<stderr>:[gpu-node-17:20311] *** Process received signal ***\n"
    "[1,6]<stderr>:[gpu-node-17:20311] Signal: Segmentation fault (11)\n"
    "[1,6]<stderr>:[gpu-node-17:20311] Signal code: Address not mapped (1)\n"
    "[1,6]<stderr>:[gpu-node-17:20311] [ 0] /lib/x86_64-linux-gnu/libpthread.so.0(+0x10330)"
    "[0x7f92a72fb330]\n"
)
EXEC_DENIED = (
    "running script\n"
    "slurmstepd: error: execve(): start-train.sh: Permission denied\n"
    "srun: error: gpu-node-02: task 0: Exited with exit code 13\n"
)


def test_open_mpi_tagged_crash_blames_the_host_and_rank_it_names() -> None:
    got = diagnose_text(OPEN_MPI_CRASH)
    assert (got.cause, got.blamed_node, got.blamed_rank) == ("native_crash", "gpu-node-17", 6)


def test_a_task_program_slurm_may_not_execute_is_the_jobs() -> None:
    assert diagnose_text(EXEC_DENIED).cause == "user_exception"


WATCHDOG_THEN_ABORT = (
    "[rank0]:[E0507 03:22:40.991 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600082 milliseconds before timing out.\n"
    "[rank0]:[E0507 03:22:40.992 ProcessGroupNCCL.cpp:1395] [PG 0 Rank 0] NCCL communicator was "
    "aborted on rank 0.\n"
)
REMOTE_THEN_ABORT = (
    "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.20.5\n"
    "[rank1]:[E0507 03:22:41.001 ProcessGroupNCCL.cpp:1395] [PG 0 Rank 1] NCCL communicator was "
    "aborted on rank 1.\n"
)


def test_the_communicator_abort_follows_what_caused_it() -> None:
    # ProcessGroupNCCL aborts its communicator after a watchdog timeout and after an
    # asynchronous NCCL error: the abort line is the consequence, the line before it the cause.
    assert diagnose_text(WATCHDOG_THEN_ABORT).cause == "nccl_timeout"
    assert diagnose_text(REMOTE_THEN_ABORT).cause == "nccl_remote"


# Ray's memory monitor, in the words of its docs (docs.ray.io, ray-oom-prevention): the task's
# error names the node it ran on, and the raylet's summary names the node it killed on.
RAY_TASK_OOM = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.62.231, ID: e5d953ef03e55e26f13973ea1b5a0fd0ecc729cd820b5efe5"
    "e7e7e21) where the task (task ID: 43534ce9375fa8e4cd0d0ec285d9974a6a95897401000000, "
    "name=allocate_memory, pid=11362, memory used=1.25GB) was running was 3.77GB / 3.77GB "
    "(1.00082), which exceeds the memory usage threshold of 0.95.\n"
)
RAY_MEMORY_LINE_ONLY = RAY_TASK_OOM.split("\n", 1)[1]
RAYLET_SUMMARY = (
    "(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3097: 10 Workers "
    "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
    "reasons at node (ID: 2c82620270df6b9dd7ae2791ef51ee4b5a9d5df9f795986c10dd219c, IP: "
    "172.31.183.172) over the last time period.\n"
)
# The same summary where nothing was killed for memory: the workers crashed otherwise.
RAYLET_NO_OOM = RAYLET_SUMMARY.replace("10 Workers", "0 Workers").replace(
    "0 Workers crashed", "3 Workers crashed"
)


@pytest.mark.parametrize(
    ("log", "node"),
    [
        (RAY_TASK_OOM, "10.0.62.231"),
        (RAY_MEMORY_LINE_ONLY, "10.0.62.231"),
        (RAYLET_SUMMARY, "172.31.183.172"),
    ],
)
def test_rays_memory_monitor_blames_the_node_it_names(log: str, node: str) -> None:
    got = diagnose_text(log)
    assert (got.cause, got.blamed_node) == ("host_oom", node)


def test_a_raylet_summary_without_memory_kills_is_not_host_oom() -> None:
    assert diagnose_text(RAYLET_NO_OOM).cause != "host_oom"


# The DeepSpeed launcher's handler with the return code it prints last: the code is the
# evidence, the guess for a log cut before it is not needed.
DEEPSPEED_SEGV = DEEPSPEED_CUT.rstrip("\n") + "] exits with return code = -11\n"
# torchrun's failure block for a rank that died of SIGBUS under srun: the training process
# itself received the signal (docs/failure-taxonomy.md native_crash: a SIGBUS exit of the
# training process), as srun's own "Bus error" for a task is.
ELASTIC_SIGBUS = (
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2024-05-02_11:20:31\n"
    "  host      : gpu-node-09\n"
    "  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : -7 (pid: 31337)\n"
    "  error_file: <N/A>\n"
    "  traceback : Signal 7 (SIGBUS) received by PID 31337\n"
    "============================================================\n"
)


# The handler's verdict with a plain exit status: the rank exited by itself (an error the
# excerpt does not hold), not killed; no signal, so nothing to guess from.
DEEPSPEED_STATUS_1 = DEEPSPEED_CUT.rstrip("\n") + "] exits with return code = 1\n"


def test_a_launchers_return_code_outranks_the_guess_for_a_cut_log() -> None:
    assert diagnose_text(DEEPSPEED_SEGV).cause == "native_crash"
    assert diagnose_text(DEEPSPEED_CUT).cause == "host_oom"
    assert diagnose_text(DEEPSPEED_STATUS_1).cause != "host_oom"


def test_a_rank_torchrun_reports_dead_of_sigbus_crashed_natively() -> None:
    got = diagnose_text(ELASTIC_SIGBUS)
    assert (got.cause, got.blamed_node) == ("native_crash", "gpu-node-09")


# srun --label's task prefix over NCCL's start-up line, which names the host printing it
# ("host:pid:tid [dev] NCCL INFO Setting affinity for GPU 0 ..."): the task that crashed later
# ran there.
SRUN_TASK_SEGFAULT = (
    "3: gpu-node-21:48812:48830 [3] NCCL INFO Setting affinity for GPU 3 to ffff0000\n"
    "3: Fatal Python error: Segmentation fault\n"
    "3: \n"
    "3: Thread 0x00001484 (most recent call first):\n"
    '3:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",'
    " line 3938 in barrier\n"
)


def test_a_crashed_tasks_host_is_the_one_nccls_start_up_line_named() -> None:
    got = diagnose_text(SRUN_TASK_SEGFAULT)
    assert (got.cause, got.blamed_node) == ("native_crash", "gpu-node-21")


# An uncaught C++ exception aborts the process (std::terminate's "terminate called after
# throwing an instance of X", then its what()): the message is the cause, the abort its
# consequence. c10::Error carrying CUDA's out-of-memory error is the GPU's memory.
TERMINATE_CUDA_OOM = (
    "terminate called after throwing an instance of 'c10::Error'\n"
    "  what():  CUDA error: out of memory\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 "
    "(most recent call first):\n"
)
TERMINATE_OTHER = (
    "terminate called after throwing an instance of 'c10::Error'\n"
    "  what():  owning_ptr == NullType::singleton() || owning_ptr->refcount_.load() == 0\n"
)


def test_an_uncaught_cpp_exception_is_read_by_its_message() -> None:
    assert diagnose_text(TERMINATE_CUDA_OOM).cause == "gpu_oom"
    assert diagnose_text(TERMINATE_OTHER).cause == "native_crash"


# Script errors a library raises for the user: transformers' HfArgumentParser refusing arguments
# the launcher passed (hf_argparser.py: "Some specified arguments are not used by the
# HfArgumentParser"), and omegaconf's errors for a key the job's config lacks.
HF_ARGS_UNUSED = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/sft.py", line 40, in <module>\n'
    "    args, = parser.parse_args_into_dataclasses()\n"
    '  File "/opt/conda/lib/python3.10/site-packages/transformers/hf_argparser.py", line 347, in'
    " parse_args_into_dataclasses\n"
    '    raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: '
    '{remaining_args}")\n'
    "ValueError: Some specified arguments are not used by the HfArgumentParser: "
    "['--local_rank=1']\n"
)
OMEGACONF_MISSING = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 22, in <module>\n'
    "    steps = cfg.optim.steps\n"
    '  File "/opt/conda/lib/python3.10/site-packages/omegaconf/dictconfig.py", line 359, in'
    " __getattr__\n"
    "    self._format_and_raise(key=key, value=None, cause=e)\n"
    "omegaconf.errors.ConfigAttributeError: Key 'steps' is not in struct\n"
)
# An object-store transfer failing in a data library's own words, the store's URL named.
STORE_DOWNLOAD_FAILED = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/streaming/base/stream.py", line 459, in'
    " get_shards\n"
    "    filename = self._download_file(basename)\n"
    "RuntimeError: Failed to download gs://corpus/mds/train/index.json -> "
    "/tmp/tmpx/train/index.json. Got errors:\n"
)


@pytest.mark.parametrize(
    ("want", "log"),
    [
        ("user_exception", HF_ARGS_UNUSED),
        ("user_exception", OMEGACONF_MISSING),
        ("object_storage", STORE_DOWNLOAD_FAILED),
    ],
)
def test_a_librarys_exception_is_read_by_whose_fault_it_names(want: str, log: str) -> None:
    assert diagnose_text(log).cause == want


# Megatron's iteration record printed over several lines, each ending with its field separator
# " |": one record, read as one (no lm loss and a NaN grad norm, nothing skipped).
MEGATRON_WRAPPED = (
    " iteration        4/      50 | consumed samples:        16384 | elapsed time per iteration"
    " (ms): 20391.1 | learning rate: 1.200000E-04 | global batch size:  4096 | lm loss: "
    "1.043511E+01 | loss scale: 1.0 | grad norm: 7.311 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |\n"
    "iteration 5/50 | elapsed time per iteration: 21392.5 ms |\n"
    "learning rate: 1.350000E-04 | global batch size: 4096 |\n"
    "loss scale: 1.0 | grad norm: nan |\n"
    "number of skipped iterations: 0 | number of nan iterations: 0\n"
)
# The same record healthy: the loss printed, the grad norm finite.
MEGATRON_WRAPPED_HEALTHY = MEGATRON_WRAPPED.replace(
    "loss scale: 1.0 | grad norm: nan |\n",
    "lm loss: 1.021E+01 | loss scale: 1.0 | grad norm: 6.9 |\n",
)


def test_a_metrics_record_wrapped_after_its_separators_is_one_record() -> None:
    assert diagnose_text(MEGATRON_WRAPPED).cause == "loss_nan"
    assert diagnose_text(MEGATRON_WRAPPED_HEALTHY).cause != "loss_nan"


# A library's dataset loader run from its source checkout (PyPA's src layout, installed
# editable: https://packaging.python.org/en/latest/discussions/src-layout-vs-flat-layout/),
# not from site-packages: still the library's loader refusing the data.
SRC_LAYOUT_LOADER = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/train/tuner.py", line 50, in run_exp\n'
    "    run_sft(model_args, data_args, training_args, finetuning_args, generating_args)\n"
    '  File "/home/u/LLaMA-Factory/src/llamafactory/data/loader.py", line 82, in'
    " _load_single_dataset\n"
    '    raise ValueError(f"File {local_path} not found.")\n'
    "ValueError: File data/alpaca_zh_demo.json not found.\n"
)


def test_a_librarys_loader_from_its_source_checkout_is_dataset_loading() -> None:
    assert diagnose_text(SRC_LAYOUT_LOADER).cause == "dataset_loading"
