"""Kernel Xid lines from a followed file: parsing, GPU mapping, rotation, restart."""

from __future__ import annotations

import os
from pathlib import Path

from collectors.backends.base import NodeReading
from collectors.schema import GpuInfo, parse_node_events
from collectors.watchers.kernel import (
    GpuMap,
    KernelLogSource,
    parse_journal_entry,
    parse_kernel_line,
    parse_kmsg_record,
    pci_key,
)
from collectors.watchers.nodeevents import NodeEventWatcher
from collectors.watchers.tail import FileTail

TOKEN = "k" * 32
TS = 1_760_000_000.0
GPUS = [
    GpuInfo(index=i, uuid=f"GPU-{i:04d}-test", pci_bus_id=bus)
    for i, bus in enumerate(["00000000:18:00.0", "00000000:3B:00.0", "00000000:5D:00.0"])
]
XID_79 = "[Tue May  7 03:12:44 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus."


def append(path: Path, *lines: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


def test_pci_addresses_of_kernel_and_nvml_name_the_same_gpu():
    assert pci_key("0000:3b:00") == pci_key("00000000:3B:00.0") == (0, 0x3B, 0)
    assert GpuMap(GPUS).find("0000:5d:00").index == 2
    assert GpuMap(GPUS).find("0000:99:00") is None


def test_an_xid_line_becomes_an_event_with_pid_text_and_gpu():
    ev = parse_kernel_line(XID_79, GpuMap(GPUS), TS)
    assert (ev.kind, ev.xid, ev.pid, ev.gpu_index, ev.gpu_uuid) == (
        "xid",
        79,
        48213,
        1,
        "GPU-0001-test",
    )
    assert ev.message == "pid=48213, name=python, GPU has fallen off the bus." and ev.ts == TS
    nvlink = "May 07 03:12:44 node-12 kernel: NVRM: Xid (PCI:0000:18:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 3(0x10000, 0x0)"
    ev = parse_kernel_line(nvlink, GpuMap(GPUS), TS)
    assert (ev.xid, ev.pid, ev.gpu_index) == (74, None, 0)
    iso = "2024-05-07T03:12:44+0000 node-12 kernel: NVRM: Xid (PCI:0000:5d:00): 48, pid=1, name=python, DBE"
    assert parse_kernel_line(iso, GpuMap(GPUS), TS).ts == 1715051564.0  # the line's own time
    newer = "node-07 kernel: NVRM: The NVIDIA GPU 0000:5d:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus and is not responding to commands."
    ev = parse_kernel_line(newer, GpuMap(GPUS), TS)
    assert (ev.kind, ev.gpu_index, ev.xid) == ("gpu_lost", 2, None)
    assert (
        parse_kernel_line("NVRM: loading NVIDIA UNIX x86_64 Kernel Module", GpuMap(GPUS), TS)
        is None
    )


def source(log: Path, state: Path) -> KernelLogSource:
    src = KernelLogSource("seren", "gpu-node-01", [], str(log), state)
    src.observe([NodeReading("seren", "gpu-node-01", GPUS)])  # the inventory of this round
    return src


def test_a_line_appended_to_the_kernel_log_arrives_mapped_to_its_gpu(tmp_path):
    log, state = tmp_path / "kern.log", tmp_path / "state"
    append(log, "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.")
    watcher = NodeEventWatcher([source(log, state)], lambda c, n: TOKEN)
    assert watcher.poll(TS) == []  # what was there before the agent started is not shipped
    append(log, "kernel: usb 1-1: new device", XID_79)
    ((_, text),) = watcher.poll(TS + 10)
    watcher.commit()
    batch = parse_node_events(text)
    (ev,) = batch.gpu_events
    assert (ev.xid, ev.gpu_index, ev.source, batch.node) == (79, 1, "file", "gpu-node-01")
    watcher.close()


def test_after_a_restart_the_log_is_followed_from_where_it_was_left(tmp_path):
    log, state = tmp_path / "kern.log", tmp_path / "state"
    log.touch()
    first = source(log, state)
    append(log, XID_79)
    assert len(first.poll(TS)[0].gpu_events) == 1
    first.commit()
    first.close()
    append(log, XID_79.replace(": 79,", ": 48,"))  # written while the agent was down
    second = source(log, state)
    (found,) = second.poll(TS + 60)
    assert [e.xid for e in found.gpu_events] == [48]
    second.close()


def test_a_rotated_then_truncated_file_loses_and_repeats_no_line(tmp_path):
    path = tmp_path / "app.log"
    append(path, *(f"line {i}" for i in range(1, 4)))
    tail = FileTail(path)
    got = [text for _, text in tail.read()]
    append(path, "line 4", "line 5")
    # logrotate's rename: the writer still holds the old file and adds a line to it.
    os.rename(path, tmp_path / "app.log.1")
    append(tmp_path / "app.log.1", "line 6")
    append(path, "line 7", "line 8")  # the new file
    got += [text for _, text in tail.read()]
    append(path, "line 9")
    got += [text for _, text in tail.read()]
    with open(path, "r+") as fh:  # copytruncate: the file is emptied in place
        fh.truncate(0)
    got += [text for _, text in tail.read()]
    append(path, "line 10", "line 11")
    got += [text for _, text in tail.read()]
    tail.close()
    assert got == [f"line {i}" for i in range(1, 12)]


def test_line_numbers_and_a_partial_last_line_survive_a_restart(tmp_path):
    path = tmp_path / "app.log"
    append(path, "a", "b")
    with open(path, "a") as fh:
        fh.write("c (half")
    tail = FileTail(path)
    assert tail.read() == [(1, "a"), (2, "b")]
    saved = tail.position
    tail.close()
    append(path, " done)")
    again = FileTail(path, position=saved)
    assert again.read() == [(3, "c (half done)")]
    again.close()


def test_a_kmsg_record_gives_its_sequence_time_and_message():
    raw = b"3,1907,8123456789,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=9, GPU has fallen off the bus.\n SUBSYSTEM=pci\n"
    seq, usec, text = parse_kmsg_record(raw)
    assert (seq, usec) == (1907, 8123456789)
    assert parse_kernel_line(text, GpuMap(GPUS), TS).gpu_index == 1
    assert parse_kmsg_record(b"garbage") is None


def test_a_journal_entry_gives_its_cursor_time_and_message():
    raw = (
        b'{"__CURSOR":"s=ab;i=12","__REALTIME_TIMESTAMP":"1715051564000000",'
        b'"MESSAGE":"NVRM: Xid (PCI:0000:18:00): 74, pid=3, name=python, NVLink: fatal error"}'
    )
    cursor, stamp, text = parse_journal_entry(raw)
    assert (cursor, stamp) == ("s=ab;i=12", 1715051564.0)
    assert parse_kernel_line(text, GpuMap(GPUS), stamp).gpu_index == 0
    as_bytes = b'{"__CURSOR":"c","MESSAGE":[78,86,82,77,58,32,255]}'
    assert parse_journal_entry(as_bytes)[2].startswith("NVRM: ")
    assert parse_journal_entry(b"not json") is None


def test_a_file_truncated_while_the_agent_was_down_is_read_from_its_start(tmp_path):
    path = tmp_path / "kern.log"
    append(path, *(f"old line {i}" for i in range(20)))
    tail = FileTail(path, from_end=True)
    assert tail.read() == []
    saved = tail.position
    tail.close()
    path.write_text("")  # truncated in place: same inode
    append(path, "new line")
    again = FileTail(path, position=saved, from_end=True)
    assert again.read() == [(1, "new line")]
    again.close()
