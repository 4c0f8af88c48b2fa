"""Record a real node's NVML answers into a fake-NVML fixture.

    python -m collectors.record --out node.yaml [--samples 10 --interval 1]

Runs the nvml backend exactly as the agent does (same probe, same calls, same order) and
writes every answer, error codes included, per GPU UUID and round, in the format that
`collectors.testing.fake_nvml` replays. A GPU lost during the recording gets `lost_at_step`.
Review the file before committing it: it contains serial numbers and UUIDs of real boards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml as N
import yaml

from collectors.backends.base import BackendError
from collectors.backends.nvml import LOST_CODES, NvmlBackend


def _plain(value: Any) -> Any:
    if isinstance(value, N.NVMLError):
        return {"error": int(value.value)}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class Recorder:
    """The backend hook: keeps every answer by (GPU UUID, fixture key, round)."""

    def __init__(self) -> None:
        self.round = 0
        self.driver_version: str | None = None
        self.answers: dict[str, dict[str, dict[int, Any]]] = {}
        self.lost: dict[str, int] = {}

    def hook(self, uuid: str, key: str, value: Any) -> None:
        if not uuid:
            if key == "nvmlSystemGetDriverVersion" and not isinstance(value, N.NVMLError):
                self.driver_version = _plain(value)
            return
        if isinstance(value, N.NVMLError) and value.value in LOST_CODES:
            self.lost.setdefault(uuid, self.round)
            return
        self.answers.setdefault(uuid, {}).setdefault(key, {})[self.round] = _plain(value)

    def fixture(self, rounds: int) -> dict[str, Any]:
        gpus: dict[str, dict[str, Any]] = {}
        for uuid, calls in self.answers.items():
            last_round = min(self.lost.get(uuid, rounds), rounds)
            entry: dict[str, Any] = {}
            if uuid in self.lost:
                entry["lost_at_step"] = self.lost[uuid]
            for key, by_round in calls.items():
                seq: list[Any] = []
                current = by_round[min(by_round)]
                for r in range(max(last_round, 1)):
                    current = by_round.get(r, current)
                    seq.append(current)
                entry[key] = seq[0] if all(v == seq[0] for v in seq) else {"seq": seq}
            gpus[uuid] = entry
        fixture: dict[str, Any] = {}
        if self.driver_version:
            fixture["driver_version"] = self.driver_version
        fixture["gpus"] = gpus
        return fixture


def record(
    samples: int,
    interval_s: float,
    *,
    on_round: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Sample `samples` rounds `interval_s` apart; return the fixture as a dict."""
    rec = Recorder()
    backend = NvmlBackend("record", "record", hook=rec.hook)
    try:
        for r in range(samples):
            rec.round = r
            backend.read(clock())
            if on_round is not None:
                on_round()
            if r + 1 < samples:
                sleep(interval_s)
    finally:
        backend.close()
    return rec.fixture(samples)


def dump(fixture: dict[str, Any], path: Path, samples: int, interval_s: float) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    header = (
        f"# Recorded by python -m collectors.record on {socket.gethostname()} at {stamp}:\n"
        f"# {samples} rounds, {interval_s:g} s apart. Format: collectors/testing/fake_nvml.py.\n"
    )
    path.write_text(
        header + yaml.safe_dump(fixture, sort_keys=False, width=100, default_flow_style=None),
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collectors.record", description="Record NVML answers into a fixture."
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--fixture", help="record from a fake-NVML fixture instead of the GPU")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.interval < 0:
        parser.error("--samples must be >= 1 and --interval >= 0")
    fake = None
    if args.fixture:
        from collectors.testing.fake_nvml import FakeNvml

        fake = FakeNvml(args.fixture).install()
    try:
        fixture = record(
            args.samples, args.interval, on_round=fake.advance if fake is not None else None
        )
    except BackendError as exc:
        print(f"record: {exc}", file=sys.stderr)
        return 3
    finally:
        if fake is not None:
            fake.uninstall()
    dump(fixture, args.out, args.samples, args.interval)
    print(f"recorded {len(fixture['gpus'])} GPUs x {args.samples} rounds to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
