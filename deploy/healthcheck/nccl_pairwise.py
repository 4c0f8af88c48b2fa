#!/usr/bin/env python3
"""Two-round pairwise NCCL all-gather test: which of a job's nodes is bad (Hu et al., NSDI'24, §6).

When a failure blames no node (an NCCL hang or timeout), Acme paired the job's nodes and ran
an NCCL all-gather in each pair; in a second round, every node of a failed pair was re-tested
with a node that had passed. A node that fails with a known-good partner is bad.

Run it as one batch job over the nodes to check (this is what Vigil's recovery submits):

    sbatch --parsable --export=NONE -N 4 -w n1,n2,n3,n4 --exclusive -o check.out nccl_pairwise.py

or by hand in local mode with a command of your own per pair:

    nccl_pairwise.py --nodes n1,n2,n3 --pair-cmd 'my-pair-test {a} {b}'

It prints one verdict line per node on stdout (README.md, "The line protocol"):

    VIGIL-HEALTH <node> PASS [detail...]
    VIGIL-HEALTH <node> FAIL <detail...>

and exits 0 when every node passed, 1 when any failed, 2 on bad usage (no verdict lines).

Standard library only, Python 3.9+: sbatch copies this one file to the batch node, so it
imports nothing of Vigil. The worker mode (`--worker`, one process per GPU, started by srun)
imports torch when it runs, and only then.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

LINE_PREFIX = "VIGIL-HEALTH"
# What the worker's rank 0 prints on success; the driver copies the bandwidth into the detail.
BANDWIDTH_PREFIX = "VIGIL-PAIR"

# A healthy pair finishes in well under a minute (srun launch, torch import, NCCL init, a few
# all-gathers); a hang is what this test looks for, so the limit bounds the whole check at
# about two rounds of it.
DEFAULT_TIMEOUT_S = 180
# "A few hundred MB" gathered per GPU: big enough to drive NVLink and the inter-node fabric
# for a measurable time, small enough for any datacenter GPU.
DEFAULT_SIZE_MB = 256
# Acme's and most training nodes: 8 GPUs each (the paper's clusters are 8-GPU DGX nodes).
DEFAULT_GPUS_PER_NODE = 8
# torch.distributed's conventional rendezvous port; pair i uses BASE + i.
DEFAULT_PORT = 29500
ALL_GATHER_ITERS = 10
# Grace between SIGTERM and SIGKILL when a pair command runs past its limit (srun needs a
# moment to cancel the step on every node).
KILL_GRACE_S = 10
DETAIL_MAX_CHARS = 300

Pair = tuple[str, str]  # (node_a, node_b); (node, node) is a node tested alone


class PairResult(NamedTuple):
    passed: bool
    detail: str = ""


class Verdict(NamedTuple):
    passed: bool
    detail: str


# --- planning and verdicts: plain functions over plain data -----------------------------------


def rounds(nodes: list[str], results: dict[Pair, PairResult] | None = None) -> list[list[Pair]]:
    """The rounds to run, each a list of pairs run in parallel (a node at most once per round).

    Round one pairs neighbours (n1,n2), (n3,n4), ...; an odd last node is tested alone,
    written (n, n), meanwhile. Round two depends on round one, so it is planned only once
    `results` holds every round-one pair:

    - each node round one did not clear (its pair failed, or it was the odd one) is paired
      with a node that passed; when such nodes outnumber the nodes that passed, round two
      runs in waves, each good node once per wave;
    - when no pair passed, those nodes are re-paired among themselves with new partners, and
      one left without a new partner is tested alone (unless it already was).

    A node that failed alone is bad already and is not tested again.
    """
    nodes = list(dict.fromkeys(nodes))
    if len(nodes) < 2:
        return [[(n, n) for n in nodes]] if nodes else []
    first = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2:
        first.append((nodes[-1], nodes[-1]))
    if results is None or any(pair not in results for pair in first):
        return [first]
    good = [
        n for n in nodes if any(results[(a, b)].passed for a, b in first if a != b and n in (a, b))
    ]
    failed_alone = {a for a, b in first if a == b and not results[(a, b)].passed}
    suspects = [n for n in nodes if n not in good and n not in failed_alone]
    if not suspects:
        return [first]
    if good:
        waves = [suspects[i : i + len(good)] for i in range(0, len(suspects), len(good))]
        return [first] + [[(s, good[j]) for j, s in enumerate(wave)] for wave in waves]
    partner_of = {a: b for a, b in first}
    partner_of.update({b: a for a, b in first})
    second: list[Pair] = []
    left = list(suspects)
    while left:
        node = left.pop(0)
        new = next((n for n in left if n != partner_of[node]), None)
        if new is not None:
            left.remove(new)
            second.append((node, new))
        elif partner_of[node] != node:
            second.append((node, node))
    return [first, second] if second else [first]


def verdicts(nodes: list[str], results: dict[Pair, PairResult]) -> dict[str, Verdict]:
    """PASS or FAIL for each node, with the evidence, from the pair results of every round.

    - A node that passed with a partner is good (PASS).
    - A node that failed with a good partner is bad (FAIL); so is one that failed alone.
    - A failed pair of two nodes that neither rule decides needs one bad node to explain it.
      The nodes in a smallest set that explains every such pair FAIL (all of them when
      several sets are equally small: the results cannot tell which node is bad); the other
      nodes PASS, their failures explained by their partners.
    - A node with no result FAILs ("not tested").
    """
    nodes = list(dict.fromkeys(nodes))
    tests: dict[str, list[tuple[str, PairResult]]] = {n: [] for n in nodes}
    for (a, b), result in results.items():
        tests.setdefault(a, []).append((b, result))
        if a != b:
            tests.setdefault(b, []).append((a, result))
    good = {n for n, ts in tests.items() if any(p != n and r.passed for p, r in ts)}
    out: dict[str, Verdict] = {}
    for node in nodes:
        ts = tests[node]
        if node in good:
            partner, result = next((p, r) for p, r in ts if p != node and r.passed)
            out[node] = Verdict(True, _joined(f"passed with {partner}", result.detail))
        elif not ts:
            out[node] = Verdict(False, "not tested")
        elif any(p == node and not r.passed for p, r in ts):
            out[node] = Verdict(False, _joined("failed alone", _detail_with(ts, node)))
        elif any(p in good and not r.passed for p, r in ts):
            # The latest such test: round two's, made for this node with a good partner.
            partner = next(p for p, r in reversed(ts) if p in good and not r.passed)
            detail = _detail_with(ts, partner)
            out[node] = Verdict(False, _joined(f"failed with known-good {partner}", detail))
    unexplained = [
        (a, b)
        for (a, b), r in results.items()
        if a != b and not r.passed and a not in out and b not in out
    ]
    covers = _smallest_covers(unexplained, order=nodes)
    for node in nodes:
        if node in out:
            continue
        failed_with = ", ".join(dict.fromkeys(p for p, r in tests[node] if not r.passed))
        if covers is None and any(node in pair for pair in unexplained):
            why = "too many failed pairs to tell which node is bad"
        elif covers and all(node in c for c in covers):
            why = "the fewest bad nodes that explain the failed pairs include it"
        elif covers and any(node in c for c in covers):
            why = "the results cannot tell which node of those pairs is bad"
        elif not failed_with:
            # Tested alone only: the lone node of the job, or an odd one no partner was left for.
            out[node] = Verdict(True, _joined("passed alone", tests[node][0][1].detail))
            continue
        else:
            alone = " (passed alone)" if any(p == node for p, _ in tests[node]) else ""
            out[node] = Verdict(True, f"its failed pairs are explained by {failed_with}{alone}")
            continue
        last = next(r.detail for p, r in reversed(tests[node]) if not r.passed)
        out[node] = Verdict(
            False, _joined(f"failed with {failed_with}; no known-good partner; {why}", last)
        )
    return {n: out[n] for n in nodes}


# Finding a smallest explanation tries every subset; past this many undecided nodes (every
# pair failing, e.g. a fabric-wide fault) they all FAIL instead.
MAX_UNDECIDED = 12


def _smallest_covers(pairs: list[Pair], order: list[str]) -> list[set[str]] | None:
    """Every smallest set of nodes holding one node of each pair; None if too many nodes."""
    candidates = [n for n in order if any(n in p for p in pairs)]
    if not pairs:
        return []
    if len(candidates) > MAX_UNDECIDED:
        return None
    for size in range(1, len(candidates) + 1):
        covers = [
            set(c)
            for c in itertools.combinations(candidates, size)
            if all(a in c or b in c for a, b in pairs)
        ]
        if covers:
            return covers
    return []


def _detail_with(tests: list[tuple[str, PairResult]], partner: str) -> str:
    return next((r.detail for p, r in tests if p == partner and not r.passed), "")


def _joined(head: str, detail: str) -> str:
    return f"{head}: {detail}" if detail else head


def health_line(node: str, verdict: Verdict) -> str:
    """One line of the protocol: no newline or tab inside, the detail cut to a readable size."""
    detail = one_line(verdict.detail)
    word = "PASS" if verdict.passed else "FAIL"
    return f"{LINE_PREFIX} {node} {word} {detail}".rstrip()


def one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_MAX_CHARS else text[: DETAIL_MAX_CHARS - 3] + "..."


# --- running pairs ----------------------------------------------------------------------------


def pair_nodes(pair: Pair) -> list[str]:
    a, b = pair
    return [a] if a == b else [a, b]


def template_command(template: str, pair: Pair) -> list[str]:
    """`--pair-cmd` with {a}, {b}, {nodes} ("a,b", or "a" alone) and {num_nodes} filled in."""
    nodes = pair_nodes(pair)
    values = {
        "{a}": pair[0],
        "{b}": pair[1],
        "{nodes}": ",".join(nodes),
        "{num_nodes}": str(len(nodes)),
    }
    words = shlex.split(template)
    for key, value in values.items():
        words = [w.replace(key, value) for w in words]
    return words


def worker_command(pair: Pair, port: int, args: argparse.Namespace, worker_path: str) -> list[str]:
    """The default per-pair command: one worker per GPU on each node of the pair."""
    nodes = pair_nodes(pair)
    return [
        "srun",
        f"-N{len(nodes)}",
        "-w",
        ",".join(nodes),
        f"--ntasks-per-node={args.gpus_per_node}",
        f"--gpus-per-node={args.gpus_per_node}",
        # One rank that dies must not leave the others waiting in the collective.
        "--kill-on-bad-exit=1",
        *shlex.split(args.srun_args),
        args.python,
        worker_path,
        "--worker",
        "--master-port",
        str(port),
        "--size-mb",
        str(args.size_mb),
        "--timeout-s",
        str(args.timeout_s),
    ]


def run_command(command: list[str], timeout_s: float) -> PairResult:
    """Run one pair command; passed when it exits 0 within `timeout_s`."""
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # its own process group, so a timeout stops all of it
        )
    except OSError as exc:
        return PairResult(False, f"could not run {command[0]}: {exc.strerror}")
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        return PairResult(False, f"timed out after {timeout_s:g} s (a hang)")
    if proc.returncode != 0:
        return PairResult(False, _joined(f"exit {proc.returncode}", _last_line(output)))
    bandwidth = re.search(rf"^{BANDWIDTH_PREFIX} (.*)$", output, re.MULTILINE)
    return PairResult(True, bandwidth.group(1).strip() if bandwidth else "")


def _stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.communicate(timeout=KILL_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def job_nodes(nodes_arg: str) -> list[str]:
    """--nodes if given, else the nodes of the Slurm allocation this runs in."""
    if nodes_arg:
        return [n for n in (s.strip() for s in nodes_arg.split(",")) if n]
    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    return hostnames(nodelist) if nodelist else []


def hostnames(nodelist: str) -> list[str]:
    """A Slurm hostlist ("n[1-3,7]") as node names, in Slurm's order."""
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.split()


def broadcast_self() -> str:
    """Copy this file to the same path on every node of the allocation; that path.

    sbatch runs a copy of the script from slurmd's spool folder on the batch node only, so
    the workers srun starts elsewhere need their own copy (sbcast is Slurm's tool for it).
    The copy goes into a private folder (0700) of a random name, made on every node first: a
    predictable name in a shared /tmp is a path another user can plant a link at.
    """
    folder = tempfile.mkdtemp(prefix="vigil-nccl-pairwise-")
    nodes = os.environ.get("SLURM_JOB_NUM_NODES", "1")
    subprocess.run(
        ["srun", f"-N{nodes}", "--ntasks-per-node=1", "mkdir", "-p", "-m", "700", folder],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    dest = os.path.join(folder, "nccl_pairwise.py")
    subprocess.run(
        ["sbcast", "--force", os.path.abspath(__file__), dest],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return dest


def check(args: argparse.Namespace, nodes: list[str]) -> dict[str, Verdict]:
    """Run both rounds and return each node's verdict."""
    if args.pair_cmd:

        def command(pair: Pair, port: int) -> list[str]:
            return template_command(args.pair_cmd, pair)
    else:
        worker_path = __file__
        if os.environ.get("SLURM_JOB_ID"):
            try:
                worker_path = broadcast_self()
            except (OSError, subprocess.SubprocessError) as exc:
                why = getattr(exc, "stderr", "") or str(exc)
                return {n: Verdict(False, f"sbcast of the worker failed: {why}") for n in nodes}

        def command(pair: Pair, port: int) -> list[str]:
            return worker_command(pair, port, args, worker_path)

    results: dict[Pair, PairResult] = {}
    plan = rounds(nodes)
    ran = 0
    port = args.port
    while ran < len(plan):
        wave = plan[ran]
        name = "round 1" if ran == 0 else f"round 2 (wave {ran})" if len(plan) > 2 else "round 2"
        log(f"{name}: {', '.join('+'.join(pair_nodes(p)) for p in wave)}")
        commands = [command(pair, port + i) for i, pair in enumerate(wave)]
        port += len(wave)
        with ThreadPoolExecutor(max_workers=len(wave)) as pool:
            outcomes = list(pool.map(lambda c: run_command(c, args.timeout_s), commands))
        results.update({pair: outcomes[i] for i, pair in enumerate(wave)})
        ran += 1
        plan = rounds(nodes, results)  # round two is planned from round one's results
    return verdicts(nodes, results)


def log(message: str) -> None:
    print(f"nccl_pairwise: {message}", file=sys.stderr, flush=True)


# --- the worker: one process per GPU, started by srun -----------------------------------------


def worker(args: argparse.Namespace) -> int:
    """All-gather `size_mb` per GPU across the pair's GPUs; exit 0 when every rank received
    exactly what the others sent. Rank 0 prints the bus bandwidth."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = int(os.environ["SLURM_PROCID"])
    world = int(os.environ["SLURM_NTASKS"])
    local_rank = int(os.environ.get("SLURM_LOCALID", "0"))
    # Rank 0 runs on the first node of the step's list, which Slurm sorts (not the order
    # given to -w); PyTorch Lightning's SLURMEnvironment picks its root node the same way.
    master = hostnames(os.environ["SLURM_STEP_NODELIST"])[0]
    torch.cuda.set_device(local_rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{master}:{args.master_port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=args.timeout_s),
    )
    elements = max(1, args.size_mb * 2**20 // 4 // world)  # int32 elements each rank sends
    send = torch.full((elements,), rank, dtype=torch.int32, device="cuda")
    recv = torch.empty(elements * world, dtype=torch.int32, device="cuda")
    dist.all_gather_into_tensor(recv, send)  # warm-up: connections are set up lazily
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ALL_GATHER_ITERS):
        dist.all_gather_into_tensor(recv, send)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / ALL_GATHER_ITERS
    expected = torch.arange(world, dtype=torch.int32, device="cuda").unsqueeze(1)
    wrong = (recv.view(world, elements) != expected).any().to(torch.int32).reshape(1)
    dist.all_reduce(wrong)  # every rank learns whether any rank received bad data
    if rank == 0 and wrong.item() == 0:
        # Bus bandwidth of an all-gather: bytes received / time x (n-1)/n
        # (NVIDIA nccl-tests, doc/PERFORMANCE.md).
        algbw = recv.numel() * 4 / seconds / 1e9
        busbw = algbw * (world - 1) / world
        print(f"{BANDWIDTH_PREFIX} all-gather busbw {busbw:.1f} GB/s over {world} GPUs", flush=True)
    dist.destroy_process_group()
    if wrong.item():
        print(f"rank {rank}: all-gather delivered wrong data", file=sys.stderr, flush=True)
        return 1
    return 0


# --- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Two-round pairwise NCCL all-gather test of a job's nodes; prints "
        "'VIGIL-HEALTH <node> PASS|FAIL [detail]' per node."
    )
    parser.add_argument(
        "--nodes", default="", help="comma-separated nodes (default: the Slurm allocation's)"
    )
    parser.add_argument(
        "--pair-cmd",
        default="",
        help="command run per pair instead of the NCCL workers, with {a} {b} {nodes} "
        "{num_nodes} filled in; exit 0 means the pair passed",
    )
    parser.add_argument("--timeout-s", type=int, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--size-mb", type=int, default=DEFAULT_SIZE_MB)
    parser.add_argument("--gpus-per-node", type=int, default=DEFAULT_GPUS_PER_NODE)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="first rendezvous port")
    parser.add_argument("--srun-args", default="", help="extra srun options for the workers")
    parser.add_argument("--python", default=sys.executable, help="python with torch on the nodes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--master-port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("timeout_s", "size_mb", "gpus_per_node", "port"):
        if getattr(args, name) < 1:
            parser.error(
                f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}"
            )
    if args.worker and not (args.master_port and os.environ.get("SLURM_STEP_NODELIST")):
        parser.error("--worker runs under srun (SLURM_STEP_NODELIST) with --master-port")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        return worker(args)
    try:
        nodes = job_nodes(args.nodes)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"nccl_pairwise: cannot list the allocation's nodes: {exc}", file=sys.stderr)
        return 2
    if not nodes:
        print(
            "nccl_pairwise: no nodes: pass --nodes or run inside a Slurm allocation",
            file=sys.stderr,
        )
        return 2
    result = check(args, nodes)
    for node, verdict in result.items():
        print(health_line(node, verdict), flush=True)
    failed = [n for n, v in result.items() if not v.passed]
    log(f"{len(nodes)} nodes, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
