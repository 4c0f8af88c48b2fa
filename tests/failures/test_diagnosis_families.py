"""The diagnosis reads the members of the platforms' own error catalogs (diagnosis/families.py),
not only the phrases its development logs showed: an errno by its E-name or Rust's "os error n",
every ibverbs work-completion status, CUDA's error enums, S3's and HTTP's retryable errors on a
store's endpoint, the kill reports of shells and process managers, Python's import errors,
Rich's box-drawn tracebacks and the Hugging Face libraries' error classes. Plain functions over
text: no database or broker.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import RuleError, catalogue_parse, diagnose_text

RICH_LIBRARY = """\
╭───────────────────── Traceback (most recent call last) ─────────────────────╮
│ /home/u/proj/train.py:88 in <module>                                         │
│                                                                              │
│ ❱ 88 │   trainer.train()                                                     │
│                                                                              │
│ /opt/conda/lib/python3.10/site-packages/transformers/trainer.py:1539 in      │
│ train                                                                        │
│                                                                              │
│ ❱ 1539 │   │   return inner_training_loop(                                   │
╰──────────────────────────────────────────────────────────────────────────────╯
KeyError: 'loss'
"""

RICH_SCRIPT = """\
╭───────────────────── Traceback (most recent call last) ─────────────────────╮
│ /home/u/proj/train.py:88 in <module>                                         │
│ ❱ 88 │   cfg = load_cfg(args.config)                                         │
│ /home/u/proj/cfg.py:12 in load_cfg                                           │
│ ❱ 12 │   return cfg["model"]["name"]                                         │
╰──────────────────────────────────────────────────────────────────────────────╯
ValueError: model name must be a string, got None
"""

IMPORT_IN_LIBRARY = """\
Traceback (most recent call last):
  File "/home/u/train.py", line 3, in <module>
    from transformers import AutoModelForCausalLM
  File "/opt/conda/lib/python3.10/site-packages/transformers/__init__.py", line 26, in <module>
    from . import dependency_versions_check
  File "/opt/conda/lib/python3.10/site-packages/transformers/dependency_versions_check.py", line 57
ModuleNotFoundError: No module named 'tokenizers'
"""

PATH_IN_LIBRARY = """\
Traceback (most recent call last):
  File "/home/u/train.py", line 40, in <module>
    state = torch.load(args.resume)
  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 986, in load
    with _open_file_like(f, "rb") as opened_file:
  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 435, in _open_file_like
    return _open_file(name_or_buffer, mode)
PermissionError: [Errno 13] Permission denied: '/shared/ckpt/run2/last.pt'
"""

LOSS_EXPLODES = "".join(
    f"Epoch [1][{50 * i}/2766]\tlr: 0.01000, loss_cls: 0.5, acc: 91.0, loss: {v}\n"
    for i, v in enumerate((0.8474, 2.4435, 1.1, 4421.5308), 1)
)
SUFFIXED_LOSS_NAN = (
    "02:29:53: train iter: 0 loss_net: 0.9443 loss_scale: 32768.0000 norm: 21.8862\n"
    "02:31:56: train iter: 100 loss_net: nan loss_scale: 785.4200 norm: nan\n"
)

CASES = [
    # errno by E-name, Rust's os error, and a FUSE mount's ENOTCONN on a path
    ("filesystem", "Error: ENOSPC: no space left on device, write\n"),
    ("filesystem", "Error: failed to write shard /ckpt/step_400/shard_3.bin (os error 122)\n"),
    ("filesystem", "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/ckpt'\n"),
    # ENOENT for the program of the job's command; Slurm's own staged script is the node's
    (
        "user_exception",
        "/var/spool/slurmd/job42/slurm_script: line 9: ./train.sh: No such file or directory\n",
    ),
    (
        "filesystem",
        "slurmstepd: error: execve(): /var/spool/slurm/d/job7/slurm_script: No such file or directory\n",
    ),
    (
        "user_exception",
        "/var/spool/slurmd/job42/slurm_script: line 7: ./run.sh: Permission denied\n",
    ),
    ("user_exception", "exec /opt/conda/bin/python: exec format error\n"),
    # the scheduler refusing the job's request before it runs
    (
        "user_exception",
        "srun: error: Unable to allocate resources: Requested node configuration is not available\n",
    ),
    # a pod evicted for its node's full disk
    (
        "filesystem",
        "Message: The node was low on resource: ephemeral-storage. Container trainer was using 212Gi.\n",
    ),
    (
        "preempted",
        "RuntimeError: The TPU VM was preempted; restart the job from its last checkpoint\n",
    ),
    # ibverbs work completions: 13 is the fabric's; a local protection error only a symptom
    ("ib_link", 'rdma_poll_completions get FAILURE: status "RNR retry counter exceeded" (13)\n'),
    ("ib_link", "work completion failed: IBV_WC_RETRY_EXC_ERR (12) on qp 0x1a\n"),
    (
        "ib_link",
        "[gpu-7:4431:0:4431] ib_mlx5_log.c:143 UCX ERROR Error on QP 0x2b1: remote access error\n",
    ),
    (
        "cuda_fault",
        "[gpu-7:4431:0:4431] ib_mlx5_log.c:143 UCX ERROR Error on QP 0x2b1: local protection error\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    ),
    # CUDA's error enums and texts
    ("gpu_oom", "RuntimeError: CUDA error: out of memory\n"),
    (
        "gpu_oom",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes.\n",
    ),
    (
        "cuda_fault",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: CUDA_ERROR_ILLEGAL_ADDRESS\n",
    ),
    (
        "user_exception",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
    ),
    ("node_lost", "RuntimeError: CUDA error: no CUDA-capable device is detected\n"),
    ("user_exception", "RuntimeError: CUDA error: invalid device ordinal\n"),
    # a memory monitor's kill is the host's, whatever it names its exception
    (
        "host_oom",
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n",
    ),
    # retryable HTTP and S3 errors: the store's on its endpoint, an auxiliary service's elsewhere
    (
        "object_storage",
        "urllib.error.HTTPError: HTTP Error 503: Service Unavailable (PUT https://ckpt.s3.us-east-1.amazonaws.com/run7/step_900.pt)\n",
    ),
    (
        "object_storage",
        "uploading s3://ckpt/run7/step_900.pt\nrequests.exceptions.HTTPError: 502 Server Error: Bad Gateway for url: https://minio.internal:9000/ckpt/run7\n",
    ),
    (
        "aux_connection",
        "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://metrics.internal/api/v1/push\n",
    ),
    (
        "object_storage",
        "botocore.exceptions.ClientError: An error occurred (RequestTimeout) when calling the UploadPart operation: Your socket connection to the server was not read from\n",
    ),
    # kill reports of shells, containers and other launchers
    ("host_oom", "train-1 exited with code 137\n"),
    ("host_oom", "launch failed: signal: killed\n"),
    ("host_oom", "Killed: 9\n"),
    ("host_oom", "worker 3 finished, returncode=-9\n"),
    (
        "host_oom",
        "    State:          Terminated\n      Reason:       Error\n      Exit Code:    137\n",
    ),
    (
        "host_oom",
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY\n",
    ),
    # Python's hierarchy: a missing module is the environment's, a missing or forbidden path
    # the job's, whichever frame raised it
    ("user_exception", IMPORT_IN_LIBRARY),
    ("user_exception", PATH_IN_LIBRARY),
    # Rich tracebacks: the innermost frame decides as in a plain one, not the exception's name
    # (a KeyError alone reads as the script's, a ValueError as the framework's)
    ("framework_exception", RICH_LIBRARY),
    ("user_exception", RICH_SCRIPT),
    # network errnos: the store's on its endpoint, an auxiliary service's elsewhere
    ("aux_connection", "TimeoutError: [Errno 110] Connection timed out\n"),
    (
        "object_storage",
        'Get "https://ckpt.s3.amazonaws.com/run7/": dial tcp 52.1.2.3:443: connect: connection refused\n',
    ),
    # gRPC's retryable statuses (TensorFlow's, absl's): the store's next to its URL
    (
        "aux_connection",
        "grpc._channel._InactiveRpcError: <_InactiveRpcError of RPC that terminated with: status = StatusCode.UNAVAILABLE\n",
    ),
    (
        "object_storage",
        "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed\n\t [[{{node save/SaveV2}}]] writing gs://bkt/run3/model.ckpt-1200\n",
    ),
    # the JVM's network exceptions: a service's, the store's on a store's host
    ("aux_connection", "Caused by: java.net.SocketTimeoutException: Read timed out\n"),
    (
        "object_storage",
        "org.apache.http.NoHttpResponseException: ckpt-bucket.s3.amazonaws.com:443 failed to respond\n",
    ),
    (
        "aux_connection",
        "ConnectionError: Couldn't reach https://huggingface.co/datasets/c4/resolve/main/en/c4-train.00000-of-01024.json.gz (ReadTimeout)\n",
    ),
    # a Lustre client evicted, and the kernel's block layer (kernel lines: a combined capture)
    (
        "filesystem",
        "OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/ckpt/run4'\n",
    ),
    (
        "filesystem",
        "node-05 kernel: LustreError: 167-0: scratch-OST0004-osc-ffff8a: This client was evicted by scratch-OST0004; in progress operations using this service will fail.\n",
    ),
    (
        "filesystem",
        "[Tue May  7 06:02:11 2024] blk_update_request: I/O error, dev nvme1n1, sector 20480 op 0x1:(WRITE) flags 0x800\n",
    ),
    # an HCA's asynchronous events
    ("ib_link", "gpu-3:1234:1290 [0] NCCL WARN NET/IB : Got async event : port error\n"),
    # other schedulers' memory kills, time limits, and the clouds' preemption notices
    (
        "host_oom",
        "Message: The node was low on resource: memory. Container trainer was using 61234520Ki.\n",
    ),
    (
        "host_oom",
        'job 4242.1 exceeds job hard limit "h_vmem" of queue "gpu.q@gpu-07" (34.1G > limit:32G)\n',
    ),
    ("timeout", "=>> PBS: job killed: walltime 86415 exceeded limit 86400\n"),
    ("timeout", "TERM_RUNLIMIT: job killed after reaching LSF run time limit.\n"),
    ("preempted", "compute.instances.preempted: Instance was preempted.\n"),
    # divergence in the numbers of a short excerpt: an explosion, and a loss under a suffixed key
    # (the loss scale beside it is the scaler's, not a loss)
    ("loss_nan", LOSS_EXPLODES),
    ("loss_nan", SUFFIXED_LOSS_NAN),
    # the Hugging Face libraries' error classes
    (
        "dataset_loading",
        "datasets.utils.info_utils.NonMatchingSplitsSizesError: [{'expected': SplitInfo(name='train', num_bytes=1)}]\n",
    ),
    (
        "dataset_loading",
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url https://huggingface.co/datasets/org/set/resolve/main/train.jsonl.\n",
    ),
    (
        "model_loading",
        "OSError: meta-llama/Llama-2-7b-hf is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'\n",
    ),
]


@pytest.mark.parametrize(("want", "log"), CASES)
def test_catalog_member_read_as_its_cause(want: str, log: str) -> None:
    got = diagnose_text(log)
    assert got.cause == want, (got.cause, got.rule_id, got.detail)
    assert got.confidence > 0


def test_rule_naming_a_table_that_does_not_exist_is_rejected_with_its_name() -> None:
    text = (
        "anchors: [rror]\nrules:\n"
        "  - {id: loss, cause: loss_nan, kind: cause, tier: exception, per_line: false,"
        " patterns: ['loss'], blame: line, confidence: 0.5}\n"
        "  - {id: mine, cause: filesystem, kind: cause, tier: node, patterns: [],"
        " table: no-such-catalog, blame: line, confidence: 0.5}\n"
    )
    with pytest.raises(RuleError, match="rule mine: table must name tables"):
        catalogue_parse(text)


def test_a_healthy_short_curve_and_the_loss_scale_are_no_divergence() -> None:
    """A few printed losses that fall, and a loss scale that grows (the scaler's, not a loss):
    nothing to diagnose."""
    healthy = "".join(
        f"train iter: {100 * i} loss_net: {v} loss_scale: {s}\n"
        for i, (v, s) in enumerate(((2.5, 1.0), (1.9, 512.0), (1.7, 65536.0)))
    )
    assert diagnose_text(healthy).cause == "unknown"


def test_every_catalog_is_read_by_a_rule_and_cites_a_public_source() -> None:
    """A table no rule names would never be read; one with no public source could not be
    checked against its catalog."""
    from webapp.failures.diagnosis import catalogue_load
    from webapp.failures.diagnosis.families import TABLES

    read = {t for rule in catalogue_load().rules for t in rule.tables}
    assert read == set(TABLES)
    for table in TABLES.values():
        assert "https://" in table.source, table.id
        assert table.examples, table.id
