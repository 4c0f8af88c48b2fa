"""CPU cost of the node agent per GPU sampled, against the bare NVML calls it makes.

    .venv/bin/python bench/collector.py [--rounds 2000]

Runs the real agent path (nvml backend on the fake NVML with the H100 fixture, 8 GPUs, plus
the host node sampler, building and serializing the wire batch) and, in the same run, a
baseline: the same pynvml wrapper calls on the same fake GPUs with nothing else. The fake's own
cost is in both, so the ratio is what our code adds. The last line is one JSON object;
`cpu_percent_8gpu_1hz` is the share of one core that sampling 8 GPUs once a second costs
(goal: under 1 %). On a real GPU the driver calls cost more and the ratio shrinks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pynvml as N  # noqa: E402

from collectors.agent import Agent  # noqa: E402
from collectors.backends.nvml import CALLS, FIELD_IDS, GPM_METRICS, NvmlBackend  # noqa: E402
from collectors.testing.fake_nvml import FakeNvml  # noqa: E402

TOKEN = "bench-token-0123456789"


def cpu_per_round(fn, rounds: int) -> float:
    fn()  # warm up (first round allocates, probes caches)
    start = time.process_time()
    for _ in range(rounds):
        fn()
    return (time.process_time() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()

    with FakeNvml("h100-sxm5-80gb") as fake:
        backend = NvmlBackend("bench", "bench-node")
        sizes: list[int] = []
        agent = Agent(backend, lambda c, n: TOKEN, lambda _id, text: sizes.append(len(text)))
        clock = iter(range(1_700_000_000, 1_800_000_000))

        def agent_round() -> None:
            agent.round(float(next(clock)))
            fake.advance()

        agent_s = cpu_per_round(agent_round, args.rounds)
        backend.close()

        # Baseline: the same wrapper calls, results thrown away.
        N.nvmlInit()
        handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
        samples = [(N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()) for _ in handles]
        request = N.c_nvmlGpmMetricsGet_t()
        request.version = N.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        for i, mid in enumerate(GPM_METRICS):
            request.metrics[i].metricId = mid
        for h, (a, _b) in zip(handles, samples, strict=True):
            N.nvmlGpmSampleGet(h, a)

        def bare_round() -> None:
            for h, (a, b) in zip(handles, samples, strict=True):
                for call in CALLS:
                    call.read(h)
                N.nvmlDeviceGetFieldValues(h, list(FIELD_IDS))
                N.nvmlGpmSampleGet(h, b)
                request.sample1, request.sample2 = a, b
                N.nvmlGpmMetricsGet(request)
            fake.advance()

        bare_s = cpu_per_round(bare_round, args.rounds)
        N.nvmlShutdown()

    gpus = len(handles)
    result = {
        "gpus": gpus,
        "rounds": args.rounds,
        "batch_bytes": sizes[-1],
        "agent_cpu_ms_per_round": round(agent_s * 1e3, 4),
        "agent_cpu_us_per_gpu": round(agent_s * 1e6 / gpus, 2),
        "baseline": "bare pynvml wrapper calls on the fake NVML, same GPUs and calls",
        "baseline_cpu_ms_per_round": round(bare_s * 1e3, 4),
        "ratio_agent_to_baseline": round(agent_s / bare_s, 3),
        "cpu_percent_8gpu_1hz": round(agent_s * 100 * 8 / gpus, 4),
        "goal_cpu_percent": 1.0,
    }
    print(
        f"agent: {result['agent_cpu_ms_per_round']} ms CPU per round of {gpus} GPUs "
        f"({result['agent_cpu_us_per_gpu']} us/GPU), bare NVML calls "
        f"{result['baseline_cpu_ms_per_round']} ms; batch {result['batch_bytes']} bytes"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
