"""GPU errors from NVML: Xid event sets (through the real pynvml wrappers) and counter rises."""

from __future__ import annotations

import logging

import pytest

from collectors.agent import Agent
from collectors.backends.nvml import NvmlBackend
from collectors.schema import GpuErrorEventIn, NodeEventBatch, parse_node_events
from collectors.testing.fake_nvml import load_fixture
from collectors.watchers.counters import CounterEventSource
from collectors.watchers.nodeevents import NodeEventWatcher, coalesce
from collectors.watchers.xid import NvmlXidSource

TOKEN = "t" * 32
UUID = "GPU-6b1d4b1e-2f0c-4a5e-9d3b-0a1f7e9c100{}"


def h100(**per_gpu: dict) -> dict:
    """The H100 fixture with extra entries for some GPUs (`g3={...}` for GPU 3)."""
    fixture = load_fixture("h100-sxm5-80gb")
    for key, extra in per_gpu.items():
        fixture["gpus"][UUID.format(key.removeprefix("g"))].update(extra)
    return fixture


def run_agent(
    fake, rounds: int, *, xid: bool = True, counters: bool = True
) -> list[NodeEventBatch]:
    backend = NvmlBackend("seren", "gpu-node-01")
    sources: list = []
    if xid:
        sources.append(NvmlXidSource("seren", "gpu-node-01", backend.gpus))
    if counters:
        sources.append(CounterEventSource())
    sent: list[str] = []
    agent = Agent(
        backend,
        lambda c, n: TOKEN,
        lambda batch_id, text: None,
        interval_s=10.0,
        on_round=fake.advance,
        event_watchers=[NodeEventWatcher(sources, lambda c, n: TOKEN)],
        event_sink=lambda batch_id, text: sent.append(text),
    )
    try:
        agent.run(rounds, backfill=True)  # rounds 10 s apart, at once
    finally:
        for s in sources:
            s.close()
        backend.close()
    return [parse_node_events(text) for text in sent]


def events_of(batches: list[NodeEventBatch], kind: str) -> list[GpuErrorEventIn]:
    return [e for b in batches for e in b.gpu_events if e.kind == kind]


def test_scripted_xid_79_arrives_once_with_the_right_gpu(fake_nvml, caplog):
    caplog.set_level(logging.WARNING)
    fake = fake_nvml("h100-xid79")
    batches = run_agent(fake, 5, counters=False)
    assert len(batches) == 1
    (event,) = batches[0].gpu_events  # GPU 6's Xid 48 is not delivered: it could not register
    assert "GPU 6" in caplog.text and "cannot register" in caplog.text
    assert (event.kind, event.xid, event.source) == ("xid", 79, "nvml")
    assert (event.gpu_index, event.gpu_uuid) == (3, UUID.format(3))
    assert event.pci_bus_id == "00000000:5D:00.0" and event.count == 1
    assert (batches[0].cluster, batches[0].node, batches[0].token) == (
        "seren",
        "gpu-node-01",
        TOKEN,
    )


def test_a_gpu_that_cannot_register_is_skipped_and_the_others_still_report(fake_nvml, caplog):
    caplog.set_level(logging.WARNING)
    fake = fake_nvml(
        h100(
            g5={"nvmlDeviceRegisterEvents": {"error": 3}, "xid_events": [{"step": 1, "xid": 48}]},
            g6={"xid_events": [{"step": 1, "xid": 94}]},
        )
    )
    batches = run_agent(fake, 3, counters=False)
    assert [(e.gpu_index, e.xid) for e in events_of(batches, "xid")] == [(6, 94)]
    assert "GPU 5" in caplog.text and "cannot register" in caplog.text


def test_without_any_registered_gpu_the_source_turns_off(fake_nvml):
    fixture = load_fixture("a100-sxm4-80gb")
    for calls in fixture["gpus"].values():
        calls["nvmlDeviceRegisterEvents"] = {"error": 3}
    fake_nvml(fixture)
    backend = NvmlBackend("seren", "n1")
    try:
        assert not NvmlXidSource("seren", "n1", backend.gpus).active
    finally:
        backend.close()


def test_repeated_identical_xids_within_5_s_coalesce_into_one_with_a_count(fake_nvml):
    burst = [{"step": 1, "xid": 13}] * 3 + [{"step": 1, "xid": 31}]
    fake = fake_nvml(h100(g1={"xid_events": burst}))
    batches = run_agent(fake, 3, counters=False)
    got = sorted((e.xid, e.count) for e in events_of(batches, "xid"))
    assert got == [(13, 3), (31, 1)]


def test_coalescing_keeps_sources_and_windows_apart():
    def ev(ts: float, source: str = "nvml", xid: int = 79) -> GpuErrorEventIn:
        return GpuErrorEventIn(ts=1.7e9 + ts, kind="xid", source=source, gpu_index=3, xid=xid)

    merged = coalesce([ev(0), ev(2), ev(4.9), ev(6), ev(1, "kmsg"), ev(1, xid=48)])
    summary = sorted((e.ts - 1.7e9, e.source, e.xid, e.count) for e in merged)
    assert summary == [
        (0, "nvml", 79, 3),
        (1, "kmsg", 79, 1),
        (1, "nvml", 48, 1),
        (6, "nvml", 79, 1),
    ]


def test_counter_increases_become_events_and_the_first_reading_is_only_a_baseline(fake_nvml):
    fake = fake_nvml(
        h100(
            g2={
                "nvmlDeviceGetTotalEccErrors(1,0)": {"seq": [3, 3, 4, 4, 0]},  # 0: GPU reset
                "nvmlDeviceGetRemappedRows": {"seq": [[0, 0, 0, 0], [0, 1, 1, 0]]},
            },
            g4={"nvmlDeviceGetFieldValues(52)": {"seq": [7, 7, 7, 9]}},  # NVLink replays
            g5={"nvmlDeviceGetFieldValues(38)": {"seq": [0, 5, 10, 15]}},  # CRC noise, < 100/s
        )
    )
    batches = run_agent(fake, 6, xid=False)
    dbe = events_of(batches, "ecc_dbe")
    assert [(e.gpu_index, e.delta, e.source) for e in dbe] == [(2, 1, "counter")]
    assert [(e.gpu_index) for e in events_of(batches, "remap")] == [2]
    assert [(e.gpu_index, e.delta) for e in events_of(batches, "nvlink")] == [(4, 2)]
    # The fixture's GPU 3 shows two corrected errors at step 2 (h100-sxm5-80gb.yaml).
    assert [(e.gpu_index, e.delta) for e in events_of(batches, "ecc_sbe")] == [(3, 2)]


@pytest.mark.parametrize("rounds", [1])
def test_no_events_means_no_batch(fake_nvml, rounds):
    fake = fake_nvml("a100-sxm4-80gb")
    assert run_agent(fake, rounds) == []


def test_a_fixture_can_only_extend_gpus_its_base_has(tmp_path):
    (tmp_path / "base.yaml").write_text("gpus:\n  GPU-a: {nvmlDeviceGetName: A}\n")
    (tmp_path / "bad.yaml").write_text("extends: base\ngpus:\n  GPU-b: {xid_events: []}\n")
    with pytest.raises(ValueError, match="GPU-b is not in the fixture it extends"):
        load_fixture(tmp_path / "bad.yaml")
