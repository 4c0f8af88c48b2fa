"""Host metrics for the node row: CPU, memory, Ethernet and InfiniBand rates.

Rates need two readings, so the first round reports them as null rather than a made-up 0.
Server power comes from the BMC (IPMI DCMI or Redfish, collectors/serverpower.py) when the agent
is given a reader (`--server-power`), else it stays null and the server side models it;
`gpu_count` is filled in by the GPU backend that knows how many GPUs answered.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil

from collectors.backends.base import NODE_POS, empty_node_row
from collectors.serverpower import ServerPowerReader

IB_SYSFS = Path("/sys/class/infiniband")
# port_xmit_data / port_rcv_data count 32-bit words, i.e. octets / 4 (IBTA spec, PortCounters;
# Linux Documentation/ABI/stable/sysfs-class-infiniband).
IB_WORD_BYTES = 4
# Interfaces that are not Ethernet traffic of the host: loopback, InfiniBand IPoIB (counted
# by the IB counters), container bridges and veths (their traffic is already on the uplink).
_NOT_ETHERNET = ("lo", "ib", "docker", "veth", "virbr", "cni", "flannel", "cali")


class NodeSampler:
    """Reads host counters each round and turns them into the wire node row."""

    def __init__(
        self, ib_root: Path = IB_SYSFS, server_power: ServerPowerReader | None = None
    ) -> None:
        self._ib_root = ib_root
        self._server_power = server_power
        self._prev: tuple[float, int, int, int | None, int | None] | None = None
        # psutil's cpu_percent(None) measures since its previous call; prime it now so the
        # first round reports the CPU use since start instead of a meaningless 0.0.
        psutil.cpu_percent(None)

    def _ib_bytes(self) -> tuple[int | None, int | None]:
        rx = tx = 0
        found = False
        try:
            ports = list(self._ib_root.glob("*/ports/*/counters"))
        except OSError:
            return None, None
        for counters in ports:
            try:
                rx += int((counters / "port_rcv_data").read_text()) * IB_WORD_BYTES
                tx += int((counters / "port_xmit_data").read_text()) * IB_WORD_BYTES
                found = True
            except (OSError, ValueError):
                continue
        return (rx, tx) if found else (None, None)

    def read(self, ts: float, gpu_count: int | None) -> list[Any]:
        row = empty_node_row(ts)
        row[NODE_POS["cpu_util"]] = psutil.cpu_percent(None)
        row[NODE_POS["mem_util"]] = psutil.virtual_memory().percent
        rx = tx = 0
        for name, c in psutil.net_io_counters(pernic=True).items():
            if not name.startswith(_NOT_ETHERNET):
                rx += c.bytes_recv
                tx += c.bytes_sent
        ib_rx, ib_tx = self._ib_bytes()
        now = time.monotonic()
        if self._prev is not None:
            t0, rx0, tx0, ib_rx0, ib_tx0 = self._prev
            dt = now - t0
            if dt > 0:
                row[NODE_POS["net_rx_bytes_s"]] = _rate(rx0, rx, dt)
                row[NODE_POS["net_tx_bytes_s"]] = _rate(tx0, tx, dt)
                row[NODE_POS["ib_rx_bytes_s"]] = _rate(ib_rx0, ib_rx, dt)
                row[NODE_POS["ib_tx_bytes_s"]] = _rate(ib_tx0, ib_tx, dt)
        self._prev = (now, rx, tx, ib_rx, ib_tx)
        row[NODE_POS["gpu_count"]] = gpu_count
        if self._server_power is not None:
            row[NODE_POS["server_power_w"]] = self._server_power.read_w()
        return row


def _rate(before: int | None, after: int | None, dt: float) -> float | None:
    # A counter that went down was reset (interface re-created, driver reload): no rate.
    if before is None or after is None or after < before:
        return None
    return (after - before) / dt
