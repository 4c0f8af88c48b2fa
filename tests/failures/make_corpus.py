"""Regenerate the labelled failure-log corpus in tests/data/failure_logs/.

    .venv/bin/python -m tests.failures.make_corpus

Each case is a failed job's combined capture: training noise (Megatron/DeepSpeed step lines,
NCCL INFO, warnings, benign errors), then the failure as the cluster would print it, with the
cause usually hidden among symptoms (NCCL watchdog timeouts on every rank, torchrun summaries,
srun exits, step cancels). The signature lines follow failure-signatures.md. Deterministic: a
seed per case name. labels.yaml maps file -> expected cause (and blamed node where the
taxonomy's blame rules name one).
"""

from __future__ import annotations

import random
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "data" / "failure_logs"
NODES = [f"node-{i:02d}" for i in range(1, 9)]


def ts(sec: int) -> str:
    h, rem = divmod(3 * 3600 + sec, 3600)
    m, s = divmod(rem, 60)
    return f"2024-05-07 {h:02d}:{m:02d}:{s:02d}"


def noise(r: random.Random, n: int, start: int = 0, style: str = "megatron") -> list[str]:
    lines = []
    loss = 2.4
    for i in range(n):
        t = start + i
        k = r.random()
        loss = max(1.6, loss - 0.0005 + r.uniform(-0.01, 0.01))
        if k < 0.55:
            if style == "hf":
                lines.append(
                    f"{{'loss': {loss:.4f}, 'grad_norm': {r.uniform(0.2, 0.6):.3f}, "
                    f"'learning_rate': 2.9e-05, 'epoch': {t / 1000:.2f}}}"
                )
            else:
                lines.append(
                    f"[{ts(t)}] iteration {1200 + t:8d}/  500000 | consumed samples: "
                    f"{(1200 + t) * 512} | elapsed time per iteration (ms): "
                    f"{r.uniform(980, 1040):.1f} | learning rate: 2.871E-04 | global batch size: "
                    f"  512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: "
                    f"{r.uniform(0.2, 0.5):.3f} | number of skipped iterations:   0 | number of "
                    f"nan iterations:   0 |"
                )
        elif k < 0.8:
            node = r.choice(NODES)
            lines.append(
                f"{node}:{r.randint(1000, 99999)}:{r.randint(1000, 99999)} [{r.randrange(8)}] "
                f"NCCL INFO Channel {r.randrange(32):02d}/0 : {r.randrange(64)}[{r.randrange(8)}] "
                f"-> {r.randrange(64)}[{r.randrange(8)}] [send] via NET/IB/{r.randrange(8)}/GDRDMA"
            )
        elif k < 0.88:
            lines.append(
                f"[rank{r.randrange(64)}]: /opt/conda/lib/python3.10/site-packages/torch/utils/"
                "checkpoint.py:464: UserWarning: torch.utils.checkpoint: the use_reentrant "
                "parameter should be passed explicitly."
            )
        elif k < 0.92:
            lines.append(
                f"[{ts(t)}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
                "Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
            )
        elif k < 0.95:
            lines.append(
                "wandb: Network error (ConnectionError), entering retry loop. "
                "See wandb/debug-internal.log for full traceback."
            )
        elif k < 0.97:
            lines.append(
                f"[{ts(t)}] saving checkpoint at iteration {1200 + t:8d} to /mnt/ckpt/run42"
            )
        else:
            lines.append(
                f"{r.choice(NODES)}:{r.randint(1000, 9999)}:{r.randint(1000, 9999)} [0] NCCL "
                "INFO NCCL_IB_TIMEOUT set by environment to 22."
            )
    return lines


def watchdog_all(
    ranks: range, seq: int = 84213, skip: int | None = None, t: int = 600
) -> list[str]:
    out = []
    for rk in ranks:
        if rk == skip:
            continue
        out.append(
            f"[rank{rk}]:[E0507 03:{t // 60:02d}:{t % 60:02d}.991123 {4000 + rk} "
            f"ProcessGroupNCCL.cpp:616] [Rank {rk}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1048576, "
            f"NumelOut=1048576, Timeout(ms)=600000) ran for 600082 milliseconds before timing out."
        )
    return out


def progress_all(ranks: range, seq: int, low_rank: int | None = None, t: int = 600) -> list[str]:
    out = []
    for rk in ranks:
        done = seq - 2 if rk == low_rank else seq - 1
        out.append(
            f"[rank{rk}]:[E0507 03:{t // 60:02d}:{t % 60:02d}.104 {4000 + rk} "
            f"ProcessGroupNCCL.cpp:1537] [PG 0 Rank {rk}] Exception (either an error or timeout) "
            f"detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed "
            f"NCCL work: {done}."
        )
    return out


def child_failed(rank: int, exitcode: int, host: str) -> list[str]:
    sig = {-9: "Signal 9 (SIGKILL) received by PID 402211", -6: "Signal 6 (SIGABRT)"}
    return [
        "Traceback (most recent call last):",
        '  File "/opt/conda/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "pretrain_gpt.py FAILED",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-05-07_03:10:41",
        f"  host      : {host}",
        f"  rank      : {rank} (local_rank: {rank % 8})",
        f"  exitcode  : {exitcode} (pid: 402211)",
        "  error_file: <N/A>",
        f"  traceback : {sig.get(exitcode, 'To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html')}",
        "============================================================",
    ]


def tb(prefix: str, frames: list[str], exc: str) -> list[str]:
    out = [f"{prefix}Traceback (most recent call last):"]
    for f in frames:
        out.append(f'{prefix}  File "{f}", line {100 + len(f) % 400}, in fn')
        out.append(f"{prefix}    call()")
    out.append(f"{prefix}{exc}")
    return out


USER = "/home/alice/llm/pretrain_gpt.py"
MEGA = "/workspace/Megatron-LM/megatron/training/training.py"
TORCH = "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py"


def srun_tail(node: str, task: int, cancel: bool = True) -> list[str]:
    out = [f"srun: error: {node}: task {task}: Exited with exit code 1"]
    if cancel:
        out += [
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            f"slurmstepd: error: *** STEP 884213.0 ON {NODES[0]} CANCELLED AT 2024-05-07T03:10:44 ***",
        ]
    return out


def kern(node: str, text: str, style: int) -> str:
    if style == 0:
        return f"May 07 03:09:{12 + len(text) % 40:02d} {node} kernel: {text}"
    if style == 1:
        return f"{node}: [Tue May  7 03:09:{12 + len(text) % 40:02d} 2024] {text}"
    return f"2024-05-07T03:09:{12 + len(text) % 40:02d}+00:00 {node} kernel: {text}"


# --- Cases: (file stem, cause, blamed node or None, builder(rng) -> failure lines) ----------


def cases():  # noqa: C901 - a catalogue of cases
    C = []

    def add(stem, cause, node=None, kernel=None):
        def deco(fn):
            C.append((stem, cause, node, fn, kernel))
            return fn

        return deco

    # gpu_off_bus: hidden behind NCCL timeouts on every rank
    for i, (node, style) in enumerate([("node-03", 0), ("node-06", 1), ("node-02", 2)]):

        @add(f"gpu_off_bus_{i + 1}", "gpu_off_bus", node)
        def _(r, node=node, style=style, i=i):
            x = (
                "NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, GPU has fallen off the bus."
                if i != 1
                else "NVRM: The NVIDIA GPU 0000:86:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus and is not responding to commands."
            )
            return (
                [kern(node, x, style), kern(node, "NVRM: GPU 0000:3b:00.0: GPU is lost.", style)]
                + watchdog_all(range(16))
                + progress_all(range(16), 84213)
                + child_failed(0, -6, "node-01")
                + srun_tail("node-01", 0)
            )

    for i, (node, code, style) in enumerate(
        [("node-05", 74, 0), ("node-07", 74, 2), ("node-04", 145, 1)]
    ):

        @add(f"gpu_nvlink_{i + 1}", "gpu_nvlink", node)
        def _(r, node=node, code=code, style=style):
            return (
                [
                    kern(
                        node,
                        f"NVRM: Xid (PCI:0000:b7:00): {code}, pid=1234, name=python, NVLink: fatal error detected on link 3(0x10000, 0x0)",
                        style,
                    ),
                    kern(node, "NVRM: Xid (PCI:0000:b7:00): 45, pid=1234, Ch 00000010", style),
                ]
                + ["[rank40]: RuntimeError: CUDA error: an illegal memory access was encountered"]
                + watchdog_all(range(8))
                + srun_tail(node, 40)
            )

    for i, (node, code) in enumerate([("node-02", 48), ("node-08", 95), ("node-05", 94)]):
        # Xid 94 is RESTART_APP in NVIDIA's catalog: the job's own fault (docs/xid-catalog.md).
        @add(f"gpu_ecc_{i + 1}", "cuda_fault" if code == 94 else "gpu_ecc", node)
        def _(r, node=node, code=code):
            return (
                ["[rank17]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
                if code == 48
                else []
            ) + [
                kern(
                    node,
                    f"NVRM: Xid (PCI:0000:1a:00): {code}, pid=77123, name=python3, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x2c014",
                    0,
                ),
                *watchdog_all(range(4, 12)),
                *srun_tail(node, 17),
            ]

    # Xid 63 is IGNORE in NVIDIA's catalog: the ranks' timeouts are all that explain the job.
    @add("gpu_ecc_4_rowremap", "nccl_timeout", None)
    def _(r):
        return [
            kern(
                "node-06",
                "NVRM: Xid (PCI:0000:c1:00): 63, pid=8812, Row Remapper: New row marked for remapping, reset gpu to activate.",
                1,
            ),
            *watchdog_all(range(8)),
            *srun_tail("node-01", 0),
        ]

    for i, (node, code) in enumerate([("node-04", 119), ("node-01", 62), ("node-08", 120)]):

        @add(f"gpu_firmware_{i + 1}", "gpu_firmware", node)
        def _(r, node=node, code=code):
            return [
                kern(
                    node,
                    f"NVRM: Xid (PCI:0000:9a:00): {code}, pid=3312, name=python, Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL).",
                    2,
                ),
                "[rank2]: RuntimeError: CUDA error: unspecified launch failure",
                *watchdog_all(range(8)),
                *srun_tail(node, 2),
            ]

    for i, node in enumerate(["node-07", "node-03", "node-05"]):

        @add(f"node_lost_{i + 1}", "node_lost", node)
        def _(r, node=node):
            lines = watchdog_all(range(8)) + [
                "node-02:2231:2290 [0] misc/socket.cc:540 NCCL WARN socketProgress: Connection closed by remote peer "
                f"{node}<46172>",
                f"srun: error: Node failure on {node}",
                "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T03:10:40 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
            ]
            return lines

    @add("node_lost_4_unfit", "node_lost", "node-04")
    def _(r):
        return [
            "node-04: [rank24]: RuntimeError: No CUDA GPUs are available",
            *srun_tail("node-04", 24),
        ]

    for i, (node, peer) in enumerate(
        [("node-03", "10.20.1.17"), ("node-06", "10.20.1.22"), ("node-02", "10.20.1.9")]
    ):

        @add(f"ib_link_{i + 1}", "ib_link", node)
        def _(r, node=node, peer=peer, i=i):
            lines = [
                f"{node}:81234:81301 [2] transport/net_ib.cc:1712 NCCL WARN NET/IB : Got completion from peer {peer}<59412> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.20.1.13 hca mlx5_2",
                f"{node}:81234:81301 [2] NCCL INFO transport/net.cc:1134 -> 6",
                "[rank9]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.20.5",
                *watchdog_all(range(4)),
            ]
            if i == 1:
                lines.insert(
                    0,
                    kern(
                        node,
                        "mlx5_core 0000:0c:00.0: mlx5_port_event:375:(pid 0): Port: 1 Link DOWN",
                        0,
                    ),
                )
            return lines + srun_tail(node, 9)

    for i, host in enumerate(["metrics.internal", "wandb.corp.example", "10.0.0.5"]):

        @add(f"aux_connection_{i + 1}", "aux_connection", None)
        def _(r, host=host, i=i):
            exc = [
                f"requests.exceptions.ConnectionError: HTTPConnectionPool(host='{host}', port=8428): Max retries exceeded with url: /api/v1/import (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f3a>: Failed to establish a new connection: [Errno 111] Connection refused'))",
                "ConnectionRefusedError: [Errno 111] Connection refused",
                "torch.distributed.DistNetworkError: The client socket has timed out after 1800000ms while trying to connect to (node-01, 29500).",
            ][i]
            return (
                tb(
                    "[rank0]: ",
                    [USER, "/opt/conda/lib/python3.10/site-packages/requests/adapters.py"],
                    exc,
                )
                + [
                    "[rank5]:[E0507 03:10:41.1 4005 ProcessGroupNCCL.cpp:1413] [PG 0 Rank 5] Heartbeat monitor timed out! Process will be terminated after dumping debug info."
                ]
                + child_failed(0, 1, "node-01")
            )

    for i, exc in enumerate(
        [
            'botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "http://s3.storage.internal:9000/ckpt/run42/iter_0004000/model.pt"',
            "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation (reached max retries: 4): Please reduce your request rate.",
            "urllib3.exceptions.ReadTimeoutError: AWSHTTPSConnectionPool(host='s3.us-east-1.amazonaws.com', port=443): Read timeout on endpoint URL: \"https://s3.us-east-1.amazonaws.com/bkt/shard-0042.tar\"",
        ]
    ):

        @add(f"object_storage_{i + 1}", "object_storage", None)
        def _(r, exc=exc):
            return (
                tb(
                    "[rank0]: ",
                    [USER, "/opt/conda/lib/python3.10/site-packages/botocore/endpoint.py"],
                    exc,
                )
                + watchdog_all(range(1, 8))
                + srun_tail("node-01", 0)
            )

    for i, (exc, node) in enumerate(
        [
            ("OSError: [Errno 28] No space left on device", None),
            (
                "OSError: [Errno 116] Stale file handle: '/mnt/ckpt/iter_0012000/mp_rank_00/model_optim_rng.pt'",
                None,
            ),
            (None, "node-05"),
        ]
    ):

        @add(f"filesystem_{i + 1}", "filesystem", node)
        def _(r, exc=exc, node=node):
            if exc:
                return (
                    tb(
                        "[rank0]: ",
                        [MEGA, "/workspace/Megatron-LM/megatron/training/checkpointing.py"],
                        exc,
                    )
                    + watchdog_all(range(1, 4))
                    + srun_tail("node-01", 0)
                )
            return [
                kern(node, "INFO: task python:51234 blocked for more than 122 seconds.", 1),
                kern(
                    node,
                    '"echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
                    1,
                ),
                *watchdog_all(range(16)),
                *progress_all(range(16), 9001),
                *srun_tail("node-01", 0),
            ]

    for i, low in enumerate([5, 11, None]):

        @add(f"nccl_timeout_{i + 1}", "nccl_timeout", None)
        def _(r, low=low):
            ranks = range(16)
            return (
                watchdog_all(ranks)
                + progress_all(ranks, 84213, low_rank=low)
                + child_failed(0, -6, "node-01")
                + srun_tail("node-01", 0)
            )

    for i, peer in enumerate(["node-04", "node-08", "node-02"]):

        @add(f"nccl_remote_{i + 1}", "nccl_remote", peer)
        def _(r, peer=peer):
            return [
                f"node-01:2231:2290 [0] misc/socket.cc:540 NCCL WARN socketProgress: Connection closed by remote peer {peer}<46172>",
                "[rank2]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.20.5",
                "[rank2]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                *srun_tail("node-01", 2),
            ]

    for i, text in enumerate(
        [
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "RuntimeError: CUDA error: misaligned address",
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
        ]
    ):

        @add(f"cuda_fault_{i + 1}", "cuda_fault", "node-02")
        def _(r, text=text):
            return (
                tb("node-02: [rank11]: ", [USER, TORCH], text)
                + [
                    kern(
                        "node-02",
                        "NVRM: Xid (PCI:0000:3b:00): 13, pid=3312, name=python, Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
                        0,
                    )
                ]
                + watchdog_all(range(8))
                + srun_tail("node-02", 11)
            )

    for i, line in enumerate(
        [
            "[rank4]: RuntimeError: DataLoader worker (pid 91822) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "RuntimeError: DataLoader worker (pid(s) 4411, 4412) exited unexpectedly",
        ]
    ):

        @add(f"dataloader_killed_{i + 1}", "dataloader_killed", None)
        def _(r, line=line):
            return [
                line,
                "srun: error: node-03: task 4: Bus error",
                *watchdog_all(range(8)),
                *srun_tail("node-03", 4),
            ]

    for i, prefix in enumerate(["[rank6]: ", "node-05: [rank45]: ", ""]):

        @add(f"gpu_oom_{i + 1}", "gpu_oom", "node-05" if i == 1 else None)
        def _(r, prefix=prefix, i=i):
            exc = [
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 6 has a total capacity of 79.11 GiB of which 1.12 GiB is free.",
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 5; 79.15 GiB total capacity; 76.10 GiB already allocated)",
                "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 39.59 GiB total capacity; 36.80 GiB already allocated)",
            ][i]
            return (
                tb(prefix, [MEGA, TORCH], exc) + watchdog_all(range(8)) + srun_tail("node-05", 45)
            )

    @add("loss_nan_1", "loss_nan", "node-02")
    def _(r):
        return [
            "[rank13]: AssertionError: Rank 13: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: 5, node: node-02",
            *watchdog_all(range(4)),
            *srun_tail("node-02", 13),
        ]

    @add("loss_nan_2", "loss_nan", None)
    def _(r):
        return [
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
            *srun_tail("node-01", 0),
        ]

    @add("loss_nan_3_curve", "loss_nan", None)
    def _(r):
        out = []
        for k in range(8):
            out.append(
                f"[{ts(3000 + k)}] iteration {9000 + k:8d}/  500000 | lm loss: nan | loss scale: 1.0 | grad norm: nan | number of nan iterations:   {k + 1} |"
            )
        return out + [
            "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T03:50:11 ***"
        ]

    @add("loss_nan_4_spike", "loss_nan", None)
    def _(r):
        out = []
        for k in range(12):
            out.append(
                f"[{ts(3000 + k)}] iteration {9000 + k:8d}/  500000 | lm loss: {7.5 + r.random():.6E} | loss scale: 1.0 | grad norm: 41.2 |"
            )
        return out + [
            "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T03:50:11 ***"
        ]

    for i, lines in enumerate(
        [
            [
                "[rank0]: RuntimeError: Error(s) in loading state_dict for GPTModel:",
                "[rank0]: \tsize mismatch for decoder.layers.0.mlp.linear_fc1.weight: copying a param with shape torch.Size([11008, 4096]) from checkpoint, the shape in current model is torch.Size([22016, 4096]).",
            ],
            [
                "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"
            ],
            [
                "[rank0]: RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:",
                '[rank0]: \tUnexpected key(s) in state_dict: "model.layers.0.self_attn.rotary_emb.inv_freq".',
            ],
        ]
    ):

        @add(f"model_loading_{i + 1}", "model_loading", None)
        def _(r, lines=lines):
            return tb("", [USER, TORCH], lines[0]) + lines[1:] + srun_tail("node-01", 0)

    for i, exc in enumerate(
        [
            "datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset",
            "OSError: Can't load tokenizer for '/mnt/models/llama-7b'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/pile/pile_text_document.idx'",
        ]
    ):

        @add(f"dataset_loading_{i + 1}", "dataset_loading", None)
        def _(r, exc=exc):
            return tb(
                "[rank0]: ",
                [USER, "/opt/conda/lib/python3.10/site-packages/datasets/builder.py"],
                exc,
            ) + srun_tail("node-01", 0)

    for i, (frames, exc) in enumerate(
        [
            (
                [USER, MEGA, "/workspace/Megatron-LM/megatron/core/tensor_parallel/layers.py"],
                "AssertionError: hidden size must be divisible by tensor model parallel size",
            ),
            (
                [USER, "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py"],
                "ValueError: Attention mask should be of size (8, 1, 4096, 4096), but is torch.Size([8, 1, 2048, 2048])",
            ),
            (
                [USER, "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine.py"],
                "AttributeError: 'NoneType' object has no attribute 'step'",
            ),
        ]
    ):

        @add(f"framework_exception_{i + 1}", "framework_exception", None)
        def _(r, frames=frames, exc=exc):
            return (
                tb("[rank3]: ", frames, exc) + watchdog_all(range(4, 8)) + srun_tail("node-01", 3)
            )

    for i, node in enumerate(["node-04", "node-07", None]):

        @add(f"host_oom_{i + 1}", "host_oom", node)
        def _(r, node=node, i=i):
            if node is None:
                return [
                    "slurmstepd: error: Detected 1 oom_kill event in StepId=884213.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
                    *watchdog_all(range(8)),
                    *child_failed(0, -9, "node-01"),
                    *srun_tail("node-01", 0),
                ]
            return [
                kern(
                    node,
                    "Out of memory: Killed process 93412 (python) total-vm:412334520kB, anon-rss:398112204kB, file-rss:0kB, shmem-rss:0kB, UID:1021 pgtables:790112kB oom_score_adj:0",
                    i,
                ),
                "[rank4]: RuntimeError: DataLoader worker (pid 93412) is killed by signal: Killed.",
                *watchdog_all(range(8)),
                *child_failed(4, -9, node),
                *srun_tail(node, 4),
            ]

    for i, (frames, exc) in enumerate(
        [
            ([USER, "/home/alice/llm/data_utils.py"], "KeyError: 'attention_mask'"),
            ([USER], "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'"),
            (
                [USER, "/opt/conda/lib/python3.10/json/decoder.py"],
                "FileNotFoundError: [Errno 2] No such file or directory: '/home/alice/configs/run42.json'",
            ),
        ]
    ):

        @add(f"user_exception_{i + 1}", "user_exception", None)
        def _(r, frames=frames, exc=exc):
            return (
                tb("[rank0]: ", frames, exc) + watchdog_all(range(1, 8)) + srun_tail("node-01", 0)
            )

    @add("user_exception_4_argparse", "user_exception", None)
    def _(r):
        return [
            "usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS] ...",
            "pretrain_gpt.py: error: unrecognized arguments: --use-flash-attn2",
            *srun_tail("node-01", 0, cancel=False),
        ]

    # docs/failure-taxonomy.md: a device-side assert is a CUDA fault whatever frame
    # reports it; the case keeps its file name.
    @add("user_exception_5_device_assert", "cuda_fault", None)
    def _(r):
        return [
            "../aten/src/ATen/native/cuda/Indexing.cu:1289: indexSelectLargeIndex: block: [412,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            *tb(
                "[rank2]: ", [USER, TORCH], "RuntimeError: CUDA error: device-side assert triggered"
            ),
            *watchdog_all(range(4)),
        ]

    for i, (line, cause) in enumerate(
        [
            (
                "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T09:41:17 ***",
                "cancelled",
            ),
            (
                "slurmstepd: error: *** JOB 884214 ON node-03 CANCELLED AT 2024-05-07T11:02:09 ***",
                "cancelled",
            ),
            (
                "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T12:00:04 DUE TO TIME LIMIT ***",
                "timeout",
            ),
            (
                "slurmstepd: error: *** JOB 884215 ON node-02 CANCELLED AT 2024-05-07T12:00:04 DUE TO TIME LIMIT ***",
                "timeout",
            ),
            (
                "slurmstepd: error: *** JOB 884213 ON node-01 CANCELLED AT 2024-05-07T05:13:44 DUE TO PREEMPTION ***",
                "preempted",
            ),
            (
                "slurmstepd: error: *** JOB 884216 ON node-05 CANCELLED AT 2024-05-07T05:13:44 DUE TO PREEMPTION ***",
                "preempted",
            ),
        ]
    ):

        @add(f"{cause}_{i % 2 + 1}", cause, None)
        def _(r, line=line):
            return [
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
                line,
                "slurmstepd: error: *** STEP 884213.0 ON node-01 CANCELLED AT "
                + line.split("CANCELLED AT ")[1][:19]
                + " ***",
                "srun: error: node-01: task 0: Killed",
                *child_failed(0, -9, "node-01")[9:14],
            ]

    # Native crashes (failure-taxonomy.md native_crash; real shapes: pytorch/pytorch#80802,
    # kijai/ComfyUI-FluxTrainer#85): the training process dies in native code, the launcher's
    # summary and the step cancel follow.
    @add("native_crash_1", "native_crash", "node-04")
    def _(r):
        return [
            "node-04: /var/spool/slurmd/job884213/slurm_script: line 41: 51234 Segmentation fault      (core dumped) python pretrain_gpt.py",
            "srun: error: node-04: task 24: Exited with exit code 139",
            *srun_tail("node-04", 24),
        ]

    @add("native_crash_2", "native_crash", None)
    def _(r):
        return [
            "[rank3]: Fatal Python error: Segmentation fault",
            "[rank3]: Current thread 0x00007f3a2effd700 (most recent call first):",
            '[rank3]:   File "/opt/conda/lib/python3.10/site-packages/torch/autograd/graph.py", line 744 in _engine_run_backward',
            *child_failed(3, -11, "node-02")[9:14],
        ]

    # Requeue records (facebookincubator/submitit#1708): the SIGTERM and exits that follow
    # are the requeue's consequence; the job comes back by itself.
    for i in (1, 2):

        @add(f"requeued_{i}", "requeued", None)
        def _(r, i=i):
            return [
                f"slurmstepd: error: *** JOB 88422{i} ON node-0{i} CANCELLED AT 2024-05-07T04:00:1{i} DUE TO JOB REQUEUE ***",
                f"slurmstepd: error: *** STEP 88422{i}.0 ON node-0{i} CANCELLED AT 2024-05-07T04:00:1{i} DUE TO JOB REQUEUE ***",
                "[rank0]: Traceback (most recent call last):",
                '[rank0]:   File "/home/alice/llm/pretrain_gpt.py", line 131, in train_step',
                "[rank0]: torch.distributed.elastic.multiprocessing.api.SignalException: Process 4021 got signal: 15",
                f"srun: error: node-0{i}: tasks 0-7: Exited with exit code 1",
            ]

    @add("unknown_1", "unknown", None)
    def _(r):
        return [
            "srun: error: node-01: task 0: Exited with exit code 1",
            "[2024-05-07 03:10:44] training process exited",
        ]

    # A bare "Killed" is the shell's report of a SIGKILL, host_oom through the exit table
    # (diagnosis/exits.py); SIGTERM says nothing of a cause (launchers send it to every
    # surviving rank), so a bare "Terminated" stays unknown.
    @add("unknown_2", "unknown", None)
    def _(r):
        return ["done. exiting with status 3", "Terminated"]

    return C


def build() -> dict[str, dict]:
    OUT.mkdir(parents=True, exist_ok=True)
    labels = {}
    for stem, cause, node, fn, _kernel in cases():
        r = random.Random(stem)
        style = "hf" if r.random() < 0.25 else "megatron"
        n = r.randint(60, 250)
        lines = noise(r, n, start=590 - n, style=style)
        failure = fn(r)
        # Interleave a little noise into the failure block, as real captures do.
        mixed = []
        for line in failure:
            mixed.append(line)
            # (not into a loss curve: interleaved step lines would be part of that curve)
            if r.random() < 0.3 and not stem.startswith("loss_nan"):
                mixed.extend(noise(r, 1, start=600, style=style))
        lines += mixed
        (OUT / f"{stem}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        labels[f"{stem}.log"] = {"cause": cause, "blamed_node": node}
    with open(OUT / "labels.yaml", "w", encoding="utf-8") as f:
        f.write("# file -> expected cause and blamed node (null: none expected or not checked)\n")
        yaml.safe_dump(labels, f, sort_keys=True)
    return labels


if __name__ == "__main__":
    print(f"{len(build())} logs in {OUT}")
