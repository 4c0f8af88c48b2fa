"""Evaluation fixtures: a cluster Vigil knows with GPUs registered, a checkpoint under a
model root, the stand-in program, and learned estimates the tests control."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.factory import cluster_make
from webapp.evaluation.models import RuntimeEstimate

STANDIN = Path(__file__).with_name("standin.py")


def fleet_make(cluster: str, nodes: dict[str, int]) -> None:
    """Nodes known to Vigil with their GPUs registered (as their agents would)."""
    cluster_make(cluster, nodes, scheduler=None, uuid_format="GPU-{cluster}-{host}-{index}")


def estimates_set(rows: dict[str, tuple[float, float, float]]) -> None:
    """Learned estimates (load, infer, metrics seconds), as if from past runs."""
    for name, (load, infer, metrics) in rows.items():
        RuntimeEstimate.objects.update_or_create(
            dataset=name,
            defaults={"load_s": load, "infer_s": infer, "metrics_s": metrics, "runs": 1},
        )


@pytest.fixture
def checkpoint(tmp_path, settings) -> Path:
    """A small checkpoint folder under the model root; the stand-in program configured."""
    root = tmp_path / "models"
    ckpt = root / "internlm-7b" / "step-1000"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 4096)
    settings.VIGIL_EVAL_MODEL_ROOTS = [str(root)]
    settings.VIGIL_EVAL_PROGRAM = f"{sys.executable} {STANDIN}"
    settings.VIGIL_EVAL_WORKDIR = str(tmp_path / "evaluation")
    return ckpt
