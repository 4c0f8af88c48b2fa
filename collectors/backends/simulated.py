"""Simulated source: many virtual A100 nodes in one process, shaped like Acme's clusters.

Used for demos and load tests when there is no GPU. Distributions come from AcmeTrace
(collectors/data/acme_calibration.json, made by `python -m collectors.calibrate`): Acme's GPUs
sit near 0% or near 100% utilization, and about a third of them idle near 60 W.

How values move (a Gaussian copula, so every marginal matches the calibration exactly while
GPUs keep a state over time):
- a GPU that a simulated job holds takes its job's latent (collectors/backends/simphases.py: a
  deterministic function of the job and the time, N(0, 1) at every instant, smooth over
  minutes), so the GPUs of one job, on every node it spans, move together, each within a few
  percent of the others (LOCKSTEP_SPREAD); an injected straggler runs at half clock;
- a GPU no job holds (or every GPU, with jobs off) mixes a slow node latent and a faster GPU
  latent, both AR(1) processes with stationary N(0, 1): z = sqrt(a) z_node + sqrt(1-a) z_gpu
  is N(0, 1) at every instant;
- each metric is its calibrated quantile function at Phi(z) (plus a little noise for power),
  so a GPU at the top of the latent is at 100% util and high power;
- the board's physics bound that (docs/telemetry.md section 8): power is capped at the
  enforced limit (brief excursions at most, with SwPowerCap and lower clocks), idle power has
  its floor, and core and HBM temperatures follow the power over the node's inlet air through
  the heatsink's thermal lag, so a GPU is never cooler than its air and cools for minutes;
- the energy counter integrates power x dt, like NVML's;
- with jobs on (the default), collectors/backends/simjobs.py decides which GPUs work: a GPU
  nobody holds, or one its job leaves idle, draws from the idle part of the calibrated
  distribution (below the idle share p), a working one from the busy part (above p); the
  latents only move it within its part. The job model keeps about p of the GPUs idle, so the
  marginals still match Acme's.
- failed jobs leave GPU error events and job log windows (collectors/backends/simfailures.py),
  sent by `self.jobs.event_source()` through the node-event path; `failures=False` turns that
  off.
Acme used A100-SXM4-80GB boards (Hu et al., NSDI '24, section 2), hence the fixed attributes.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from collectors.backends import simphases
from collectors.backends.base import GPU_POS, NODE_POS, BackendError, NodeReading, Source
from collectors.backends.simfleet import JobSimulator
from collectors.backends.siminbox import INBOX_ENV
from collectors.backends.simphases import paper_twin
from collectors.schema import GPU_FIELD_NAMES, NODE_FIELD_NAMES, GpuInfo

# Named apart from the paper's Seren and Kalos, whose workloads they simulate
# (simworkload.PAPER_TWIN).
DEFAULT_CLUSTERS = ("sable", "kestrel")
DEFAULT_NODES_PER_CLUSTER = 16
DEFAULT_GPUS_PER_NODE = 8


# What the simulator knows of a board: its datasheet, what NVML shows of it idle, and how
# warm it runs over the air that cools it. Only the A100 SXM4 80GB is simulated: Acme's boards
# (Hu et al., NSDI '24, section 2), on which the calibration was measured.
@dataclass(frozen=True)
class GpuModel:
    name: str
    fb_total_bytes: int
    power_limit_w: float  # the enforced limit NVML reports by default
    idle_power_w: float  # the least a board draws in P0 with nothing running
    sm_clock_busy_mhz: float
    sm_clock_idle_mhz: float
    mem_clock_mhz: float
    pcie_gen: int
    pcie_width: int
    # The least steady-state rise over the air at a power: core_c_per_w x power for the core,
    # hbm_offset_c + hbm_c_per_w x power for HBM (docs/telemetry.md section 8).
    core_c_per_w: float
    hbm_offset_c: float
    hbm_c_per_w: float


# NVIDIA A100 SXM4 80GB datasheet: 400 W TDP, 1410 MHz boost clock, HBM2e at 1593 MHz, PCIe
# Gen4 x16; NVML reports 81920 MiB of framebuffer. 210 MHz is the idle SM clock NVML shows;
# idle boards read 54-65 W in published nvidia-smi output (e.g. 61 W / 400 W at 26 °C in
# github.com/ModelCloud/GPTQModel/issues/1626), and Acme's idle GPUs 62-66 W (calibration).
# The thermal slopes are fitted to Acme's calibration: median idle GPU 29 °C core / 44 °C HBM
# at 64 W, the busiest tenth 62 °C / 64 °C at 405 W, over a ~23 °C inlet.
A100_SXM4_80GB = GpuModel(
    name="NVIDIA A100-SXM4-80GB",
    fb_total_bytes=81920 * 2**20,
    power_limit_w=400.0,
    idle_power_w=50.0,
    sm_clock_busy_mhz=1410.0,
    sm_clock_idle_mhz=210.0,
    mem_clock_mhz=1593.0,
    pcie_gen=4,
    pcie_width=16,
    core_c_per_w=0.097,
    hbm_offset_c=17.0,
    hbm_c_per_w=0.059,
)
MODEL = A100_SXM4_80GB
FB_TOTAL_BYTES = MODEL.fb_total_bytes
FB_SCALE_BYTES = 80 * 2**30  # AcmeTrace's memory metric is FB_USED / 80 GiB
PCIE_PEAK_BYTES_S = 25e9  # ~Gen4 x16 usable bandwidth per direction
SM_CLOCK_STEP_MHZ = 15.0  # A100 SM clocks move in 15 MHz steps (nvidia-smi -q -d SUPPORTED_CLOCKS)

# Power capping: the board's controller holds its 1 s average at the enforced limit; a load
# step can read over it for the one sample in which the controller catches up (our
# assumption: at most 3%), after which it reads just under the limit at reduced clocks.
CAP_OVERSHOOT = 0.03
CAP_SETTLE = 0.02  # a capped board reads within 2% under its limit
# Dynamic power goes roughly with f x V^2 and V with f, so a board capped from P to the limit
# L runs its SM clock at about (L / P)^(1/3) of boost (our assumption).
CAP_CLOCK_EXPONENT = 1 / 3

# Inlet air: ASHRAE TC 9.9's recommended envelope for data centers is 18-27 °C; each simulated
# node draws its inlet from this range (a cold aisle, our assumption), and each GPU a preheat
# of 0-2 °C from the air that crossed the boards before it (our assumption).
INLET_C = (20.0, 25.0)
PREHEAT_C = (0.0, 2.0)
# The air Acme's calibrated temperatures are taken to be over (unpublished: our assumption, the
# mean of the two ranges above).
ACME_AIR_C = 23.5
# Thermal inertia: core and HBM approach their steady state through the heatsink, a first-
# order lag. An SXM heatsink of about 1 kg of copper and aluminium (~0.6-1 kJ/K) behind
# ~0.1 K/W to the air gives R x C of 1-2 minutes (our estimate); 120 s.
THERMAL_TAU_S = 120.0
TEMP_NOISE_C = 0.3
# What a server draws besides its GPUs (CPUs, memory, NVSwitches, NICs, fans, PSU losses):
# at least 900 W (Acme's idle nodes: about 1.5 kW with ~0.5 kW of idle GPUs), at most 2 kW
# while its GPUs idle, rising to 3.3 kW with all of them at their limit (DGX A100 datasheet:
# 6.5 kW system power at most, 8 x 400 W of it GPUs).
NON_GPU_W = (900.0, 2000.0, 3300.0)

# Persistence of the latents (seconds). Acme's GPU time is dominated by long pretraining jobs
# (median job 2 min, but most GPU-hours in jobs of hours), so node state changes slowly.
NODE_TAU_S = 1800.0
GPU_TAU_S = 300.0
JITTER_TAU_S = 30.0
NODE_SHARE = 0.8  # a: how much of a GPU's latent is its node's (a GPU no job holds)
# How far a job's GPU strays from its job's level (simphases.py), as a standard deviation of
# its activity and power: ranks of one data-parallel job wait for each other at every
# collective, so they differ by a few percent (our assumption), far less than the 0.8x that
# makes a straggler (webapp/failures/stragglers.py).
LOCKSTEP_SPREAD = 0.02
POWER_LATENT_CORR = 0.95
POWER_SALT = 0x9E37  # a job's power latent is drawn from its key with this mixed in

SIM_NAMESPACE = uuid.UUID("7a1d9e52-3c4b-4f0e-9a8d-5b6c7d8e9f01")
IDLE_REASON, POWER_CAP_REASON = 0x1, 0x4  # clocks_event_reasons bits (docs/telemetry.md section 2)
CALIBRATION_FILE = "acme_calibration.json"
# Seconds after the simulator starts at which a GPU of a working pretraining run faults (the
# demo's first live incident, JobSimulator's first_fault_at); unset: none but the workload's.
FIRST_FAULT_ENV = "VIGIL_SIM_FIRST_FAULT_S"


def first_fault_from_env() -> float | None:
    """FIRST_FAULT_ENV's seconds, None when unset; BackendError naming the variable when it is
    not a number of seconds."""
    raw = os.environ.get(FIRST_FAULT_ENV, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < math.inf:
        raise BackendError(f"{FIRST_FAULT_ENV}={raw!r}: must be a number of seconds, 0 or more")
    return seconds


def load_calibration() -> dict[str, Any]:
    text = resources.files("collectors").joinpath("data", CALIBRATION_FILE).read_text("utf-8")
    return json.loads(text)


class Quantiles:
    """Inverse CDF on a uniform percentile grid (the calibration's 0, 0.5, ..., 100)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.last = len(values) - 1

    def __call__(self, u: float) -> float:
        x = min(max(u, 0.0), 1.0) * self.last
        i = int(x)
        if i >= self.last:
            return self.values[-1]
        lo = self.values[i]
        return lo + (self.values[i + 1] - lo) * (x - i)

    def rank(self, x: float) -> float:
        """The CDF at x, the inverse of __call__ (the middle of a flat stretch)."""
        v = self.values
        lo, hi = bisect.bisect_left(v, x), bisect.bisect_right(v, x)
        if lo < hi:
            return (lo + hi - 1) / 2 / self.last
        if lo == 0:
            return 0.0
        if lo > self.last:
            return 1.0
        return (lo - 1 + (x - v[lo - 1]) / (v[lo] - v[lo - 1])) / self.last


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


class _Ar1:
    """z' = phi z + sqrt(1 - phi^2) e: stationary N(0, 1) whatever the step length."""

    __slots__ = ("z", "tau")

    def __init__(self, rng: random.Random, tau: float) -> None:
        self.z = rng.gauss(0.0, 1.0)
        self.tau = tau

    def step(self, rng: random.Random, dt: float) -> float:
        phi = math.exp(-dt / self.tau)
        self.z = phi * self.z + math.sqrt(1.0 - phi * phi) * rng.gauss(0.0, 1.0)
        return self.z


@dataclass
class _SimGpu:
    info: GpuInfo
    own: _Ar1
    jitter: _Ar1
    energy_mj: float
    ecc_sbe_agg: int
    preheat_c: float  # warmer air than the node's inlet, from the boards upstream
    core_c: float | None = None  # the lagged temperatures; None before the first reading
    hbm_c: float | None = None
    capped: bool = False  # the power controller held it at its limit at the last reading


@dataclass
class _SimNode:
    cluster: str
    node: str
    index: int  # position in its cluster (0-based)
    idle_share: float  # calibrated share of samples at ~0% utilization
    inlet_c: float  # the cold-aisle air the node takes in
    q: dict[str, Quantiles]
    latent: _Ar1
    mem_latent: _Ar1
    gpus: list[_SimGpu]
    infos: list[GpuInfo]


def node_name(cluster: str, number: int) -> str:
    return f"{cluster}-node-{number:03d}"


class SimulatedBackend:
    """`clusters` x `nodes_per_cluster` nodes x `gpus_per_node` GPUs, all in this process."""

    source: Source = "simulated"

    def __init__(
        self,
        clusters: tuple[str, ...] | list[str] = DEFAULT_CLUSTERS,
        nodes_per_cluster: int = DEFAULT_NODES_PER_CLUSTER,
        gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
        *,
        seed: int | None = None,
        calibration: dict[str, Any] | None = None,
        jobs: bool = True,
        failures: bool = True,
        inlet_c: tuple[float, float] = INLET_C,
        scheduler_inbox: Path | None = None,
        first_fault_s: float | None = None,
    ) -> None:
        if not inlet_c[0] <= inlet_c[1]:
            raise ValueError(f"inlet_c {inlet_c!r}: the low end is above the high end")
        if first_fault_s is None:
            first_fault_s = first_fault_from_env()
        calib = calibration or load_calibration()
        self._rng = random.Random(seed)
        rng = self._rng
        self._last_ts: float | None = None
        self._levels: dict[int, tuple[float, float]] = {}
        self.nodes: list[_SimNode] = []
        for cluster in clusters:
            # Clusters other than Acme's two borrow Seren's shape (the larger, public one).
            table = calib["clusters"].get(paper_twin(cluster), calib["clusters"]["seren"])
            q = {key: Quantiles(values) for key, values in table.items()}
            shares = calib["shares"].get(paper_twin(cluster), calib["shares"]["seren"])
            for n in range(1, nodes_per_cluster + 1):
                name = node_name(cluster, n)
                gpus = []
                for i in range(gpus_per_node):
                    gid = uuid.uuid5(SIM_NAMESPACE, f"{cluster}/{name}/{i}")
                    info = GpuInfo(
                        index=i,
                        uuid=f"GPU-{gid}",
                        name=MODEL.name,
                        memory_total_bytes=FB_TOTAL_BYTES,
                        pci_bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
                        serial=f"1{gid.int % 10**12:012d}",
                    )
                    gpus.append(
                        _SimGpu(
                            info=info,
                            own=_Ar1(rng, GPU_TAU_S),
                            jitter=_Ar1(rng, JITTER_TAU_S),
                            # Counter since driver load: up to ~30 days at ~200 W average.
                            energy_mj=rng.uniform(0, 30 * 86400 * 200 * 1000),
                            ecc_sbe_agg=rng.choice((0, 0, 0, 0, 2, 16)),
                            preheat_c=rng.uniform(*PREHEAT_C),
                        )
                    )
                self.nodes.append(
                    _SimNode(
                        cluster=cluster,
                        node=name,
                        index=n - 1,
                        idle_share=shares["gpu_util_le_1pct"],
                        inlet_c=rng.uniform(*inlet_c),
                        q=q,
                        latent=_Ar1(rng, NODE_TAU_S),
                        mem_latent=_Ar1(rng, NODE_TAU_S),
                        gpus=gpus,
                        infos=[g.info for g in gpus],
                    )
                )

        self.jobs: JobSimulator | None = None
        if jobs:
            layout: dict[str, list[str]] = {}
            for node in self.nodes:
                layout.setdefault(node.cluster, []).append(node.node)
            self.jobs = JobSimulator(
                layout,
                gpus_per_node,
                seed=seed,
                failures=failures,
                inventory={node.node: node.infos for node in self.nodes},
                # Scheduler commands for the simulated clusters (the demo's recovery sends
                # them): its own folder, or the one the environment names.
                inbox=scheduler_inbox
                or (Path(os.environ[INBOX_ENV]) if os.environ.get(INBOX_ENV) else None),
                # Counted from now, not from the first round: a history sent first is stamped
                # in the past, so the incident comes live.
                first_fault_at=None if first_fault_s is None else time.time() + first_fault_s,
            )

    @property
    def node_ids(self) -> list[tuple[str, str]]:
        return [(n.cluster, n.node) for n in self.nodes]

    def read(self, ts: float) -> list[NodeReading]:
        dt = 0.0 if self._last_ts is None else max(ts - self._last_ts, 0.0)
        self._last_ts = ts
        self._levels: dict[int, tuple[float, float]] = {}
        if self.jobs is not None:
            self.jobs.advance(ts)
        return [self._read_node(node, ts, dt) for node in self.nodes]

    def _job_level(self, key: int, ts: float) -> tuple[float, float]:
        """The job's activity and power latents (simphases.job_level), once per job and round
        (a job has up to thousands of GPUs). Power follows activity as a GPU's does."""
        levels = self._levels.get(key)
        if levels is None:
            z = simphases.job_level(key, ts)
            zp = POWER_LATENT_CORR * z + math.sqrt(1.0 - POWER_LATENT_CORR**2) * (
                simphases.job_level(key ^ POWER_SALT, ts)
            )
            levels = self._levels[key] = (z, zp)
        return levels

    def _state(self, u: float, node: _SimNode, busy: bool | None) -> float:
        """Map u in (0, 1) into the idle part [0, p) or the busy part [p, 1) of the quantiles."""
        if busy is None:
            return u
        p = node.idle_share
        return p + (1.0 - p) * u if busy else p * u

    def _capped(self, gpu: _SimGpu, demand: float) -> tuple[float, bool]:
        """What NVML reads of a board asking for `demand` watts under its enforced limit, and
        whether the controller is holding it there: at most CAP_OVERSHOOT over the limit in
        the sample where it reaches the cap, then just under it."""
        limit = MODEL.power_limit_w
        was_capped, gpu.capped = gpu.capped, demand > limit
        if not gpu.capped:
            return demand, False
        if not was_capped:
            return min(demand, limit * (1.0 + self._rng.uniform(0.0, CAP_OVERSHOOT))), True
        return limit * (1.0 - self._rng.uniform(0.0, CAP_SETTLE)), True

    def _temperatures(
        self, node: _SimNode, gpu: _SimGpu, power: float, dt: float
    ) -> tuple[float, float]:
        """Core and HBM temperatures: each moves toward its steady state at this power over
        the node's inlet air with the heatsink's time constant (THERMAL_TAU_S)."""
        air = node.inlet_c + gpu.preheat_c
        # Acme's temperatures at the rank of this power in Acme's powers (a GPU at its 90th
        # percentile of power sits at its 90th of temperature), over our air instead of
        # Acme's; never under the board's linear rise at this power.
        rank = node.q["gpu_power_w"].rank(power)
        core_ss = air + max(MODEL.core_c_per_w * power, node.q["gpu_temp_c"](rank) - ACME_AIR_C)
        hbm_ss = air + max(
            MODEL.hbm_offset_c + MODEL.hbm_c_per_w * power,
            node.q["mem_temp_c"](rank) - ACME_AIR_C,
        )
        if gpu.core_c is None or gpu.hbm_c is None:
            gpu.core_c, gpu.hbm_c = core_ss, hbm_ss  # a board found in its steady state
        else:
            k = 1.0 - math.exp(-dt / THERMAL_TAU_S)
            gpu.core_c += (core_ss - gpu.core_c) * k
            gpu.hbm_c += (hbm_ss - gpu.hbm_c) * k
        return gpu.core_c, gpu.hbm_c

    def _read_node(self, node: _SimNode, ts: float, dt: float) -> NodeReading:
        rng = self._rng
        q = node.q
        zn = node.latent.step(rng, dt) if dt else node.latent.z
        a = math.sqrt(NODE_SHARE)
        b = math.sqrt(1.0 - NODE_SHARE)
        c = math.sqrt(1.0 - POWER_LATENT_CORR**2)
        rows = []
        jobs = self.jobs
        for i, gpu in enumerate(node.gpus):
            zg = gpu.own.step(rng, dt) if dt else gpu.own.z
            zj = gpu.jitter.step(rng, dt) if dt else gpu.jitter.z
            busy: bool | None = None
            slow = False
            held = None if jobs is None else jobs.holder(node.cluster, node.index, i, ts)
            if held is not None:
                # A job's GPUs share its phases (simphases.py): the same quantiles for all,
                # then a few percent of their own.
                job, rank = held
                z, zp = self._job_level(job.phase_key, ts)
                busy = job.busy(rank, ts)
                slow = busy and job.slow(rank, ts)
                spread = 1.0 + LOCKSTEP_SPREAD * zj
            else:
                z = a * zn + b * zg
                zp = POWER_LATENT_CORR * z + c * zj
                busy = None if jobs is None else False
                spread = 1.0
            u = self._state(_phi(z), node, busy)
            up = self._state(_phi(zp), node, busy)
            # Utilization is coarse ("a kernel ran", in whole percent): equal across the job.
            util = round(q["gpu_util"](u))
            demand = q["gpu_power_w"](up) * spread * (1.0 + rng.gauss(0.0, 0.01))
            if slow:
                demand *= simphases.STRAGGLER_POWER_RATIO
            power, capped = self._capped(gpu, max(demand, MODEL.idle_power_w))
            power = round(power, 3)  # mW resolution, as NVML reports
            gpu.energy_mj += power * dt * 1000.0
            core, hbm = self._temperatures(node, gpu, power, dt)
            sm = min(1.0, q["sm_active_pct"](u) / 100.0 * spread)
            tensor = min(1.0, q["tensor_active_pct"](u) / 100.0 * spread)
            row = [gpu.info.index, ts, *([None] * len(GPU_FIELD_NAMES))]
            row[GPU_POS["gpu_util"]] = float(util)
            row[GPU_POS["mem_copy_util"]] = float(round(util * (0.3 + 0.2 * _phi(zj))))
            row[GPU_POS["sm_active"]] = round(sm, 4)
            # No Acme data for occupancy or DRAM activity: plausible fractions of SM activity
            # for transformer training (occupancy ~ half of active SMs, DRAM busier than tensor
            # cores on memory-bound steps).
            row[GPU_POS["sm_occupancy"]] = round(sm * 0.5, 4)
            row[GPU_POS["tensor_active"]] = round(tensor, 4)
            row[GPU_POS["dram_active"]] = round(min(1.0, sm * 0.6), 4)
            fb_used = int(q["fb_used_pct_of_80gib"](u) / 100.0 * FB_SCALE_BYTES)
            row[GPU_POS["fb_used_bytes"]] = min(fb_used, FB_TOTAL_BYTES)
            row[GPU_POS["fb_total_bytes"]] = FB_TOTAL_BYTES
            row[GPU_POS["power_w"]] = power
            row[GPU_POS["power_limit_w"]] = MODEL.power_limit_w
            row[GPU_POS["energy_mj"]] = int(gpu.energy_mj)
            # Whole degrees, as NVML reports them.
            row[GPU_POS["gpu_temp_c"]] = float(round(core + rng.gauss(0.0, TEMP_NOISE_C)))
            row[GPU_POS["mem_temp_c"]] = float(round(hbm + rng.gauss(0.0, TEMP_NOISE_C)))
            clock = MODEL.sm_clock_busy_mhz if util > 0 else MODEL.sm_clock_idle_mhz
            if capped and util > 0:
                ratio = (MODEL.power_limit_w / demand) ** CAP_CLOCK_EXPONENT
                clock = SM_CLOCK_STEP_MHZ * math.floor(clock * ratio / SM_CLOCK_STEP_MHZ)
            if slow:
                clock = round(clock * simphases.STRAGGLER_CLOCK_RATIO)
            row[GPU_POS["sm_clock_mhz"]] = clock
            row[GPU_POS["mem_clock_mhz"]] = MODEL.mem_clock_mhz
            reasons = IDLE_REASON if util == 0 else 0
            if slow:
                reasons |= simphases.HW_SLOWDOWN_REASON
            if capped:
                reasons |= POWER_CAP_REASON
            row[GPU_POS["clocks_event_reasons"]] = reasons
            for name in ("ecc_sbe_vol", "ecc_dbe_vol", "ecc_dbe_agg"):
                row[GPU_POS[name]] = 0
            row[GPU_POS["ecc_sbe_agg"]] = gpu.ecc_sbe_agg
            for name in ("remap_corr", "remap_unc", "remap_pending", "remap_failure"):
                row[GPU_POS[name]] = 0
            for name in ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery"):
                row[GPU_POS[name]] = 0
            row[GPU_POS["pcie_tx_bytes_s"]] = round(PCIE_PEAK_BYTES_S * 0.02 * sm * _phi(zj), 1)
            row[GPU_POS["pcie_rx_bytes_s"]] = round(PCIE_PEAK_BYTES_S * 0.03 * sm * _phi(zj), 1)
            row[GPU_POS["pcie_replay"]] = 0
            row[GPU_POS["pcie_gen"]] = MODEL.pcie_gen
            row[GPU_POS["pcie_width"]] = MODEL.pcie_width
            row[GPU_POS["pstate"]] = 0
            rows.append(row)
        node_busy = None if jobs is None else jobs.node_busy(node.cluster, node.index, ts)
        un = self._state(_phi(zn), node, node_busy)
        um = _phi(node.mem_latent.step(rng, dt) if dt else node.mem_latent.z)
        node_row: list[Any] = [ts, *([None] * len(NODE_FIELD_NAMES))]
        node_row[NODE_POS["cpu_util"]] = round(min(100.0, q["node_cpu_util"](un)), 2)
        node_row[NODE_POS["mem_util"]] = round(min(100.0, q["node_mem_util"](um)), 2)
        # Ethernet carries data loading and checkpoint traffic; a small multiple of CPU use.
        node_row[NODE_POS["net_rx_bytes_s"]] = round(un * 2e8 * (0.5 + rng.random()), 1)
        node_row[NODE_POS["net_tx_bytes_s"]] = round(un * 5e7 * (0.5 + rng.random()), 1)
        # AcmeTrace's IB unit is unstated; read as MB/s its maximum is HDR 200 Gb/s line rate.
        node_row[NODE_POS["ib_rx_bytes_s"]] = round(q["ib_receive_mb_s"](un) * 1e6, 1)
        node_row[NODE_POS["ib_tx_bytes_s"]] = round(q["ib_send_mb_s"](un) * 1e6, 1)
        # Acme's whole-server power at the node's rank, within what its GPUs leave possible.
        gpus = sum(row[GPU_POS["power_w"]] for row in rows)
        load = gpus / (len(rows) * MODEL.power_limit_w) if rows else 0.0
        most = NON_GPU_W[1] + (NON_GPU_W[2] - NON_GPU_W[1]) * load
        server = min(max(q["server_power_w"](un), gpus + NON_GPU_W[0]), gpus + most)
        node_row[NODE_POS["server_power_w"]] = round(server, 1)
        node_row[NODE_POS["gpu_count"]] = len(rows)
        return NodeReading(node.cluster, node.node, node.infos, rows, node_row)

    def close(self) -> None:
        pass
