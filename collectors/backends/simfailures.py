"""Failure injection for the simulated jobs: a cause per failed job, and what it leaves behind.

A simulated job that ends FAILED (collectors/backends/simjobs.py decides how many, at Acme's
rates) gets one cause from docs/failure-taxonomy.md, drawn with weights from Acme's failure table
(Hu et al., NSDI '24, Table 3; docs/failure-taxonomy.md "Reference counts"): pretraining
runs mostly fail on infrastructure (NVLink, node failure, ECC, network), the other jobs mostly
on script errors (TypeError, FileNotFoundError, KeyError, ImportError...) within minutes. The
cause leaves the traces a real one does (docs/failure-signatures.md):

- a GPU fault (Xid 79 / 74 / 48) is a GPU error event on one node, NCCL's 10-minute watchdog
  timeout (PyTorch's default) before the job dies, and then a watchdog window on EVERY node of
  the job, each with that node's rank prefixes;
- every other cause is one window on the node of the rank that raised it (a traceback, an NCCL
  WARN, slurmstepd's OOM line), and watchdog/teardown lines from the other nodes of a
  multi-node job.

The lines are shaped on the strings of docs/failure-signatures.md, so the diagnosis engine
(webapp/failures/diagnosis/) finds the injected cause from them (tests/collectors/
test_sim_failures.py checks it for every cause). Only a handful of ranks per node print, and
each window is a few dozen lines: the demo's volume stays modest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

NCCL_TIMEOUT_S = 600.0  # PyTorch's default NCCL timeout (docs/failure-signatures.md section 2)
RANKS_SHOWN_PER_NODE = 2  # ranks whose lines appear in a node's window

# (cause, weight for pretraining runs, weight for other jobs, Xid or None, exit code).
# Weights: Acme Table 3 counts (docs/failure-taxonomy.md): infrastructure NVLink 54, node failure
# 16, ECC 12, network 12, S3 10, NCCL timeout 6; framework 404 (OOM, dataloader, NaN,
# library errors); script 1,890 (TypeError 620, FileNotFoundError 568, OSError 266, KeyError
# 260, ImportError 111). Pretraining runs draw from infrastructure and framework only; the
# other jobs from script, framework and the auxiliary-service failures (ConnectionError 147),
# Kalos's evaluation jobs saw no GPU or NVLink fault (docs/acme-workload.md section 7).
CAUSES: tuple[tuple[str, float, float, int | None, int], ...] = (
    ("gpu_nvlink", 54, 0, 74, -6),
    ("gpu_off_bus", 16, 0, 79, -6),
    ("gpu_ecc", 12, 0, 48, -6),
    ("ib_link", 12, 0, None, -6),
    ("object_storage", 10, 10, None, 1),
    ("nccl_timeout", 6, 0, None, -6),
    ("loss_nan", 12, 0, None, 1),
    ("gpu_oom", 6, 120, None, 1),
    ("dataloader_killed", 4, 40, None, 1),
    ("framework_exception", 0, 150, None, 1),
    ("aux_connection", 0, 147, None, 1),
    ("host_oom", 0, 60, None, -9),
    ("filesystem", 0, 100, None, 1),
    ("user_exception", 0, 1559, None, 1),
)
HARDWARE_XID = {c: x for c, _, _, x, _ in CAUSES if x is not None}
EXIT_CODE = {c: e for c, _, _, _, e in CAUSES}

# Xid texts as the driver prints them (NVIDIA Xid catalog; docs/failure-signatures.md section 1).
XID_TEXT = {
    79: "GPU has fallen off the bus.",
    74: "NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 6, subpartition 0.",
}

USER_ERRORS = (
    ("TypeError", "forward() got an unexpected keyword argument 'attention_mask'", 620),
    ("FileNotFoundError", "[Errno 2] No such file or directory: 'configs/sft_7b.yaml'", 568),
    ("KeyError", "'input_ids'", 260),
    ("ModuleNotFoundError", "No module named 'flash_attn'", 111),
)


def draw_cause(rng: random.Random, pretrain: bool) -> str:
    causes = [c for c, *_ in CAUSES]
    weights = [(p if pretrain else o) for _, p, o, _, _ in CAUSES]
    return rng.choices(causes, weights=weights)[0]


def xid_message(xid: int, pid: int) -> str:
    """What the kernel prints after the code: `pid=..., name=..., <text>` (an event's message)."""
    return f"pid={pid}, name=python, {XID_TEXT.get(xid, '')}".rstrip(", ")


def kernel_xid_line(pci_bus_id: str, xid: int, pid: int) -> str:
    """The kernel's line for an Xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., ...`."""
    domain, bus, dev = pci_bus_id.split(":")[:3]
    bdf = f"{int(domain, 16):04x}:{bus.lower()}:{dev.split('.')[0].lower()}"
    return f"NVRM: Xid (PCI:{bdf}): {xid}, {xid_message(xid, pid)}"


@dataclass
class FailureContext:
    """What the renderer needs to know about the failing job."""

    job_id: str
    host_of_rank: list[str]  # rank -> node name
    culprit_rank: int
    step: int
    rng: random.Random


def _progress(ctx: FailureContext, rank: int, n: int = 3) -> list[str]:
    lines = []
    for k in range(n):
        step = ctx.step - n + k + 1
        loss = 2.1 + 0.3 * ctx.rng.random()
        lines.append(
            f"[rank{rank}]: iteration {step:>7} | consumed samples: {step * 512:>10} | "
            f"lm loss: {loss:.6E} | grad norm: {0.8 + ctx.rng.random():.3f} | "
            f"elapsed time per iteration (ms): {4100 + ctx.rng.randint(0, 400)}"
        )
    return lines


def _watchdog(ctx: FailureContext, rank: int, seq: int, *, teardown: bool) -> list[str]:
    """What PyTorch prints on one rank when NCCL's watchdog gives up (docs/failure-signatures.md
    section 2); the teardown lines are printed once per process group, here once per node."""
    ran = int(NCCL_TIMEOUT_S * 1000) + ctx.rng.randint(1, 999)
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, "
        "Timeout(ms)=600000)"
    )
    p = f"[rank{rank}]:"
    lines = [
        f"{p}[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: {work} ran for {ran} milliseconds before timing out.",
        f"{p}[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rank}] Exception (either an error or "
        f"timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last "
        f"completed NCCL work: {seq - 1}.",
    ]
    if teardown:
        lines += [
            f"{p}[E ProcessGroupNCCL.cpp:577] [Rank {rank}] Some NCCL operations have failed or "
            "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
            "might run on corrupted/incomplete data.",
            f"{p}[E ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data inconsistency, we are "
            "taking the entire process down.",
        ]
    return lines


def _traceback(rank: int | None, frames: list[tuple[str, int, str, str]], last: str) -> list[str]:
    p = "" if rank is None else f"[rank{rank}]: "
    out = [f"{p}Traceback (most recent call last):"]
    for path, line, fn, code in frames:
        out.append(f'{p}  File "{path}", line {line}, in {fn}')
        out.append(f"{p}    {code}")
    out.append(f"{p}{last}")
    return out


TORCH = "/opt/conda/lib/python3.10/site-packages/torch"
TRAIN = "/home/{user}/llm/train.py"


def _cause_lines(cause: str, ctx: FailureContext, rank: int, user: str) -> list[str]:
    """The lines the culprit rank prints for `cause` (after its progress lines)."""
    train = TRAIN.format(user=user)
    host = ctx.host_of_rank[rank]
    r: int | None = rank if len(ctx.host_of_rank) > 1 else None
    if cause == "loss_nan":
        return _traceback(
            r,
            [
                (train, 412, "train_step", "loss = model.backward(loss)"),
                (
                    "/opt/conda/lib/python3.10/site-packages/megatron/core/distributed/param_and_grad_buffer.py",
                    231,
                    "start_grad_sync",
                    "assert not norm.isnan(), (",
                ),
            ],
            f"AssertionError: Rank {rank}: found NaN in local grad norm in backward pass before "
            f"data-parallel communication collective. Device: {rank % 8}, node: {host}",
        )
    if cause == "gpu_oom":
        return _traceback(
            r,
            [
                (train, 388, "train_step", "outputs = model(**batch)"),
                (
                    f"{TORCH}/nn/modules/module.py",
                    1532,
                    "_wrapped_call_impl",
                    "return self._call_impl(*args, **kwargs)",
                ),
            ],
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU {rank % 8}; "
            "79.15 GiB total capacity; 75.02 GiB already allocated; 1.21 GiB free; 76.40 GiB "
            "reserved in total by PyTorch)",
        )
    if cause == "dataloader_killed":
        return _traceback(
            r,
            [
                (train, 371, "main", "for batch in loader:"),
                (
                    f"{TORCH}/utils/data/_utils/signal_handling.py",
                    66,
                    "handler",
                    "_error_if_any_worker_fails()",
                ),
            ],
            f"RuntimeError: DataLoader worker (pid {ctx.rng.randint(20000, 60000)}) is killed by "
            "signal: Bus error. It is possible that dataloader's workers are out of shared "
            "memory. Please try to raise your shared memory limit.",
        )
    if cause == "framework_exception":
        return _traceback(
            r,
            [
                (train, 290, "main", "model = torch.compile(model)"),
                (f"{TORCH}/_dynamo/eval_frame.py", 451, "_fn", "return fn(*args, **kwargs)"),
            ],
            "RuntimeError: expected scalar type BFloat16 but found Float",
        )
    if cause == "user_exception":
        name, text, _ = ctx.rng.choices(USER_ERRORS, weights=[w for *_, w in USER_ERRORS])[0]
        return _traceback(
            r,
            [
                (train, 57, "<module>", "main()"),
                (train, 133, "main", "dataset = build_dataset(args)"),
            ],
            f"{name}: {text}",
        )
    if cause == "aux_connection":
        return _traceback(
            r,
            [
                (train, 460, "log_metrics", "requests.post(METRICS_URL, json=stats, timeout=5)"),
                (
                    "/opt/conda/lib/python3.10/site-packages/requests/adapters.py",
                    519,
                    "send",
                    "raise ConnectionError(e, request=request)",
                ),
            ],
            "requests.exceptions.ConnectionError: HTTPConnectionPool(host='metrics.internal', "
            "port=8080): Max retries exceeded with url: /push (Caused by NewConnectionError("
            "'<urllib3.connection.HTTPConnection object at 0x7f2c>: Failed to establish a new "
            "connection: [Errno 111] Connection refused'))",
        )
    if cause == "object_storage":
        return _traceback(
            r,
            [
                (train, 501, "save_checkpoint", "s3.upload_file(path, BUCKET, key)"),
                (
                    "/opt/conda/lib/python3.10/site-packages/botocore/endpoint.py",
                    377,
                    "_send",
                    "return self.http_session.send(request)",
                ),
            ],
            "botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
            '"http://s3.internal:9000/ckpt/step.pt"',
        )
    if cause == "filesystem":
        return _traceback(
            r,
            [
                (train, 498, "save_checkpoint", "torch.save(state, path)"),
                (
                    f"{TORCH}/serialization.py",
                    628,
                    "save",
                    "_save(obj, opened_zipfile, pickle_module)",
                ),
            ],
            "OSError: [Errno 28] No space left on device",
        )
    if cause == "host_oom":
        return [
            f"slurmstepd: error: Detected 1 oom_kill event(s) in StepId={ctx.job_id}.0. Some of "
            "your processes may have been killed by the cgroup out-of-memory handler.",
            f"srun: error: {host}: task {rank}: Out Of Memory",
        ]
    if cause == "ib_link":
        peer = f"10.0.{ctx.rng.randint(0, 3)}.{ctx.rng.randint(2, 250)}"
        return [
            f"[rank{rank}]:{host}:{ctx.rng.randint(3000, 9000)}:{ctx.rng.randint(3000, 9000)} "
            f"[{rank % 8}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
            f"{peer}<{ctx.rng.randint(30000, 60000)}> with status=12 opcode=0 len=0 vendor err "
            "129 (Recv) localGid ::ffff:10.0.1.7 remoteGid ::ffff:" + peer,
        ]
    return []  # hardware Xids and nccl_timeout: only the watchdog lines


def render_windows(cause: str, ctx: FailureContext, user: str) -> dict[str, list[str]]:
    """node -> the window of lines that node's job log shows when the job dies of `cause`."""
    by_node: dict[str, list[int]] = {}
    for rank, host in enumerate(ctx.host_of_rank):
        by_node.setdefault(host, []).append(rank)
    culprit_host = ctx.host_of_rank[ctx.culprit_rank]
    multi = len(ctx.host_of_rank) > 1
    seq = ctx.step * 24 + ctx.rng.randint(0, 23)
    hang = cause in HARDWARE_XID or cause == "nccl_timeout"
    out: dict[str, list[str]] = {}
    for host, ranks in by_node.items():
        shown = ranks[:RANKS_SHOWN_PER_NODE]
        if host == culprit_host and ctx.culprit_rank not in shown:
            shown = [ctx.culprit_rank, *shown[: RANKS_SHOWN_PER_NODE - 1]]
        lines: list[str] = []
        for rank in shown:
            progress = _progress(ctx, rank, 2)
            lines.extend(progress if multi else [ln.split("]: ", 1)[1] for ln in progress])
        if host == culprit_host:
            lines.extend(_cause_lines(cause, ctx, ctx.culprit_rank, user))
        if hang or (multi and host != culprit_host):
            # Every rank waits in the collective until NCCL's watchdog gives up; the rank whose
            # GPU faulted is stuck in it and prints nothing.
            waiting = [r for r in ranks if not (hang and r == ctx.culprit_rank)]
            for k, rank in enumerate(waiting):
                lines.extend(_watchdog(ctx, rank, seq, teardown=k == 0))
        if multi and host == ctx.host_of_rank[0]:
            lines.extend(_torchrun_root_cause(ctx, cause))
        out[host] = lines
    return out


def _torchrun_root_cause(ctx: FailureContext, cause: str) -> list[str]:
    code = EXIT_CODE.get(cause, 1)
    sig = {-6: "Signal 6 (SIGABRT)", -9: "Signal 9 (SIGKILL)"}.get(code)
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  rank      : {ctx.culprit_rank} (local_rank: {ctx.culprit_rank % 8})",
        f"  host      : {ctx.host_of_rank[ctx.culprit_rank]}",
        f"  exitcode  : {code} (pid: {ctx.rng.randint(20000, 60000)})",
    ]
    lines.append("  error_file: <N/A>" if sig is None else f"  traceback : {sig} received")
    return lines


Renderer = Callable[[str, FailureContext, str], dict[str, list[str]]]
