"""Xid lines from the kernel log: `/dev/kmsg`, `journalctl -k -f`, or a file.

The driver prints every Xid with its text, e.g.

    NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus.

(docs/telemetry.md sections 3-5, docs/failure-signatures.md section 1). The kernel names the GPU by
PCI address (domain:bus:device, domain in 4 digits) where NVML says `00000000:3B:00.0`; both map to
the same (domain, bus, device) and so to the GPU index and UUID of the backend's inventory. Newer
drivers may print only "NVRM: The NVIDIA GPU <bdf> ... has fallen off the bus": that is a `gpu_lost`
event.

Restart-safe: a file is followed from its saved inode and offset (tail.py); `/dev/kmsg` from
the sequence number after the last record sent; journald from the cursor of the last entry
sent (`--after-cursor`). With no
saved position each starts at the end: an old kernel log is never shipped from its start.
reading /dev/kmsg needs root or CAP_SYSLOG when `kernel.dmesg_restrict=1` (docs/telemetry.md
section 3); `auto` falls back to journald, then to nothing, with one warning.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.backends.base import NodeReading
from collectors.schema import GpuErrorEventIn, GpuInfo, clean_text
from collectors.watchers.nodeevents import NodeEvents
from collectors.watchers.tail import FileTail

log = logging.getLogger("vigil.collector.kernel")

KMSG = Path("/dev/kmsg")
MAX_RECORDS_PER_ROUND = 10_000
JOURNAL_RESPAWN_S = 60.0  # a journalctl that keeps exiting is retried once a minute, no faster
MAX_FUTURE_S = 60.0  # a line stamped later than this (clock skew) is stamped "now" instead

XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\)"
    r": (?P<xid>\d+)(?:, pid=(?P<pid>'?<?\w+>?'?))?(?:, name=(?P<name>[^,]*))?(?:, (?P<text>.*))?"
)
OFF_BUS_RE = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?(?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
    r"(?:\.[0-7])?).*(?:fallen off the bus|GPU is lost)"
)
# Kernel log files written as `journalctl -k -o short-iso` does ("2024-05-07T03:12:44+0000 host
# kernel: ...") or by rsyslog with RSYSLOG_FileFormat start with an ISO stamp: the line's own
# time. Other formats (dmesg's "[Tue May  7 ...]", classic syslog without a year) get the time
# the line was read.
ISO_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")


def pci_key(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of `0000:3b:00`, `00000000:3B:00.0` or `3b:00.0`."""
    m = re.match(
        r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$", text.strip()
    )
    if not m:
        return None
    return (int(m.group(1) or "0", 16), int(m.group(2), 16), int(m.group(3), 16))


class GpuMap:
    """PCI address -> GPU, from the backend's inventory."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        self._by_pci = {
            key: g for g in gpus if g.pci_bus_id and (key := pci_key(g.pci_bus_id)) is not None
        }

    def find(self, bdf: str) -> GpuInfo | None:
        key = pci_key(bdf)
        return None if key is None else self._by_pci.get(key)


def parse_kernel_line(
    line: str, gpus: GpuMap, ts: float, source: str = "file"
) -> GpuErrorEventIn | None:
    """The GPU error event of one kernel log line, or None when it is not one."""
    m = XID_RE.search(line)
    kind = "xid"
    if m is None:
        m = OFF_BUS_RE.search(line)
        kind = "gpu_lost"
        if m is None:
            return None
    stamp = ISO_RE.match(line)
    if stamp:
        try:
            when = datetime.fromisoformat(stamp.group(1)).timestamp()
            if when <= ts + MAX_FUTURE_S:
                ts = when
        except ValueError:
            pass
    gpu = gpus.find(m.group("bdf"))
    pid = None
    if kind == "xid" and m.group("pid") and m.group("pid").isdigit():
        pid = int(m.group("pid"))
    # An Xid's message is what follows the code ("pid=..., name=..., <text>"), the part the
    # server puts back after "NVRM: Xid (PCI:<bdf>): <code>, " when it rebuilds the line
    # (webapp/failures/evidence.py xid_line); other lines keep their whole NVRM text.
    message = line[m.end("xid") :].lstrip(", ") if kind == "xid" else line[m.start() :]
    message = clean_text(message)[:2000]  # a process name may hold escapes
    return GpuErrorEventIn(
        ts=ts,
        kind=kind,  # type: ignore[arg-type]
        source=source,  # type: ignore[arg-type]
        gpu_index=gpu.index if gpu else None,
        gpu_uuid=gpu.uuid if gpu else None,
        pci_bus_id=gpu.pci_bus_id if gpu else m.group("bdf"),
        xid=min(int(m.group("xid")), 10_000) if kind == "xid" else None,
        pid=pid,
        message=message,
    )


# --- readers: each returns (text lines, stamp or None) and keeps a position ---------------


class _FileReader:
    source = "file"

    def __init__(self, path: Path, state: dict[str, Any] | None) -> None:
        self.tail = FileTail(path, position=state, from_end=True)

    def read(self) -> list[tuple[str, float | None]]:
        return [(text, None) for _, text in self.tail.read()]

    def state(self) -> dict[str, Any]:
        return self.tail.position

    def close(self) -> None:
        self.tail.close()


def parse_kmsg_record(raw: bytes) -> tuple[int, int, str] | None:
    """(sequence number, usec since boot, message) of one /dev/kmsg record.

    Format "priority,sequence,usec,flags[,...];message\n" followed by optional " KEY=value"
    continuation lines (kernel Documentation/ABI/testing/dev-kmsg).
    """
    head, sep, body = raw.decode("utf-8", errors="replace").partition(";")
    fields = head.split(",")
    try:
        seq, usec = int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None
    return (seq, usec, body.split("\n", 1)[0]) if sep else None


class _KmsgReader:
    """`/dev/kmsg`: one record per read(), "pri,seq,usec,flags;message" (kernel ABI doc
    Documentation/ABI/testing/dev-kmsg); usec is the monotonic clock since boot."""

    source = "kmsg"

    def __init__(self, path: Path, state: dict[str, Any] | None) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.last_seq: int | None = None
        saved = (state or {}).get("seq")
        boot = (state or {}).get("boot_id")
        if saved is not None and boot == _boot_id():
            self.last_seq = int(saved)  # read from the buffer start, skip what was sent
        else:
            # First start (or a reboot since): skip what the buffer holds, but learn the last
            # sequence number, so records logged while we are down are read after a restart.
            while self.read():
                pass

    def read(self) -> list[tuple[str, float | None]]:
        out: list[tuple[str, float | None]] = []
        offset = time.time() - time.monotonic()  # kmsg stamps: CLOCK_MONOTONIC (close enough)
        for _ in range(MAX_RECORDS_PER_ROUND):
            try:
                raw = os.read(self.fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten before we read them: go on with the next
                raise
            if not raw:
                break
            record = parse_kmsg_record(raw)
            if record is None:
                continue
            seq, usec, text = record
            if self.last_seq is not None and seq <= self.last_seq:
                continue
            self.last_seq = seq
            out.append((text, offset + usec / 1e6))
        return out

    def state(self) -> dict[str, Any]:
        return {"seq": self.last_seq, "boot_id": _boot_id()}

    def close(self) -> None:
        os.close(self.fd)


class _JournalReader:
    """`journalctl -k -f -o json`, read without blocking.

    JSON rather than short-iso because each entry carries its cursor (`__CURSOR`) and its time
    (`__REALTIME_TIMESTAMP`, usec): the cursor of the last entry sent is saved on commit and
    given back with `--after-cursor` at the next start (journalctl(1)), so a restart resumes
    exactly; with no saved cursor `-n 0` skips the history.
    """

    source = "journal"

    def __init__(self, state: dict[str, Any] | None) -> None:
        self.cursor: str | None = (state or {}).get("cursor")
        self._spawn()

    def _spawn(self) -> None:
        argv = ["journalctl", "-k", "-f", "-o", "json", "--no-pager"]
        argv += [f"--after-cursor={self.cursor}"] if self.cursor else ["-n", "0"]
        self._spawned_at = time.monotonic()
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._partial = b""

    def read(self) -> list[tuple[str, float | None]]:
        assert self.proc.stdout is not None
        chunks = []
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), 1 << 20)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        data = self._partial + b"".join(chunks)
        if (
            not chunks
            and self.proc.poll() is not None
            and time.monotonic() - self._spawned_at >= JOURNAL_RESPAWN_S
        ):
            # journalctl ended (journal vacuumed, killed): start again after the last entry.
            log.warning("journalctl exited with %s; restarting it", self.proc.returncode)
            self.proc.stdout.close()
            self._partial = b""
            self._spawn()
            return []
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return []
        self._partial = data[cut + 1 :]
        out: list[tuple[str, float | None]] = []
        for raw in data[:cut].split(b"\n"):
            entry = parse_journal_entry(raw)
            if entry is None:
                continue
            cursor, stamp, text = entry
            self.cursor = cursor or self.cursor
            out.append((text, stamp))
        return out

    def state(self) -> dict[str, Any]:
        return {"cursor": self.cursor}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def parse_journal_entry(raw: bytes) -> tuple[str | None, float | None, str] | None:
    """(cursor, epoch seconds, message) of one `journalctl -o json` line."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    message = entry.get("MESSAGE")
    if isinstance(message, list):  # journald sends non-UTF-8 messages as a byte array
        message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode(errors="replace")
    if not isinstance(message, str):
        return None
    try:
        stamp: float | None = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    except (KeyError, TypeError, ValueError):
        stamp = None
    cursor = entry.get("__CURSOR")
    return (cursor if isinstance(cursor, str) else None, stamp, message)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def resolve_mode(mode: str) -> str:
    """`auto` -> kmsg if readable, else journal if journalctl exists, else none."""
    if mode != "auto":
        return mode
    if os.access(KMSG, os.R_OK):
        try:
            os.close(os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK))
            return "kmsg"
        except OSError:
            pass
    if shutil.which("journalctl"):
        return "journal"
    return "none"


class KernelLogSource:
    """GPU error events from the kernel log of one node."""

    def __init__(
        self,
        cluster: str,
        node: str,
        gpus: list[GpuInfo],
        mode: str,
        state_dir: Path,
    ) -> None:
        self.cluster = cluster
        self.node = node
        self._map = GpuMap(gpus)  # refreshed from every round's readings (observe)
        self.state_path = Path(state_dir) / f"kernel-log-{node}.json"
        saved = self._load()
        self.mode = resolve_mode(mode)
        self.reader: Any = None
        self._pending: dict[str, Any] | None = None
        if self.mode == "none":
            log.warning("kernel log: no readable source (kmsg, journalctl): kernel Xids not read")
            return
        try:
            if self.mode == "kmsg":
                self.reader = _KmsgReader(KMSG, saved.get("kmsg"))
            elif self.mode == "journal":
                self.reader = _JournalReader(saved.get("journal"))
            else:
                self.reader = _FileReader(Path(self.mode), saved.get(self.mode))
        except OSError as exc:
            log.warning("kernel log %s: %s: kernel Xids not read", self.mode, exc)
            self.reader = None

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def observe(self, readings: list[NodeReading]) -> None:
        """The backend's inventory as of this round: PCI addresses -> GPU index and UUID."""
        for r in readings:
            if r.node == self.node and r.gpus:
                self._map = GpuMap(r.gpus)

    def poll(self, ts: float) -> list[NodeEvents]:
        if self.reader is None:
            return []
        records = self.reader.read()
        self._pending = self.reader.state()
        if not records:
            return []
        gpus = self._map
        events = []
        for text, stamp in records:
            if "NVRM" not in text:
                continue
            ev = parse_kernel_line(text, gpus, stamp or ts, self.reader.source)
            if ev is not None:
                events.append(ev)
        return [NodeEvents(self.cluster, self.node, gpu_events=events)] if events else []

    def commit(self) -> None:
        if self._pending is None or self.reader is None:
            return
        data = {self.mode: self._pending}
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.state_path)
        self._pending = None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
