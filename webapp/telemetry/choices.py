from django.db import models


class GpuStatus(models.TextChoices):
    """Status of a GPU on the live pages. Exactly one applies, checked in this order
    (see `selectors.gpu_status`)."""

    STALE = "stale", "Stale"  # no sample within VIGIL_STALE_AFTER_S
    ERRORING = "erroring", "Erroring"  # latest sample shows an uncorrectable memory error
    BUSY = "busy", "Busy"  # latest gpu_util >= VIGIL_BUSY_UTIL_PCT
    IDLE = "idle", "Idle"  # everything else, including a GPU that reports no utilization


# The order the overview and /metrics list them in.
GPU_STATUSES: tuple[GpuStatus, ...] = (
    GpuStatus.BUSY,
    GpuStatus.IDLE,
    GpuStatus.ERRORING,
    GpuStatus.STALE,
)

# NVML clocks event reasons (nvmlClocksEventReason*, docs/telemetry.md section 2):
# SwThermalSlowdown 0x20 and HwThermalSlowdown 0x40 are the thermal ones.
THERMAL_CLOCK_EVENTS = 0x20 | 0x40
