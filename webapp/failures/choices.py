"""Kinds and sources of failure records, shown on the failure pages (labels in `taxonomy.py`)."""

from django.db import models


class GpuErrorKind(models.TextChoices):
    # collectors/schema.py GpuErrorEventIn.kind
    XID = "xid", "Xid"
    ECC_DBE = "ecc_dbe", "ECC double-bit"
    ECC_SBE = "ecc_sbe", "ECC single-bit"
    REMAP = "remap", "Row remap"
    REMAP_FAILURE = "remap_failure", "Row remap failure"
    NVLINK = "nvlink", "NVLink"
    PCIE = "pcie", "PCIe"
    GPU_LOST = "gpu_lost", "GPU lost"


class FailureKind(models.TextChoices):
    JOB_FAILURE = "job_failure", "Job failure"
    GPU_ERROR = "gpu_error", "GPU error"
    PERFORMANCE = "performance", "Performance"


class DiagnosisSource(models.TextChoices):
    PENDING = "pending", "Pending"
    RULES = "rules", "Rules"
    LLM = "llm", "LLM (suggested)"
