"""A test Slurm whose nodes carry the stand-ins of a GPU node's own tools: `nvidia-smi` on
every job's PATH (the node's TaskProlog puts standin/ first) recording each call, and a
RebootProgram recording each reboot. slurmctld and slurmd are the real ones (tests/slurm.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realparts import missing
from tests.slurm import SlurmCluster, slurm_missing_reason
from webapp.core.embedded import process_stop

STANDIN = Path(__file__).with_name("standin")


class GpuNodeCluster(SlurmCluster):
    def __init__(self, root: Path, *, reboot: bool = True, **kwargs: object) -> None:
        super().__init__(root, **kwargs)
        # Without a RebootProgram slurmctld refuses `scontrol reboot` (bench/recovery.py: its
        # runs resume the node at once, which a reboot in progress would not allow).
        self.reboot = reboot

    @property
    def gpu_log(self) -> Path:
        """What the stand-in nvidia-smi recorded: `ARGV ...` and the jobs on the node then."""
        return self.root / "nvidia-smi.log"

    @property
    def reboots(self) -> Path:
        return self.root / "reboots.log"

    def write_config(self) -> None:
        super().write_config()
        prolog = self.root / "taskprolog.sh"
        # A TaskProlog's `export` lines set the environment of each task of a job.
        prolog.write_text(
            "#!/bin/sh\n"
            f'echo "export PATH={STANDIN}:$PATH"\n'
            f'echo "export VIGIL_FAKE_GPU_LOG={self.gpu_log}"\n'
        )
        prolog.chmod(0o755)
        extra = f"TaskProlog={prolog}\n"
        if self.reboot:
            extra += f"RebootProgram={STANDIN / 'reboot'}\n"
        self.conf.write_text(self.conf.read_text() + extra)
        self.gpu_log.touch()

    def stop(self) -> None:
        """Every daemon told to stop at once, then each waited for (by the pid in its pid
        file): slurmctld saves its state on the way out, and one after the other the daemons'
        shutdowns add up."""
        pids = {d: self._pid(d) for d in [*self.nodes, "slurmctld"]}
        for pid in pids.values():
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for daemon, pid in pids.items():
            if pid is not None:
                process_stop(pid)
                self._pidfile(daemon).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def slurm_gpu_nodes() -> Iterator[GpuNodeCluster]:
    """Two logical nodes `gn1`, `gn2` with the GPU stand-ins; started once per module."""
    reason = slurm_missing_reason()
    if reason:
        missing("slurm", reason)
    root = Path(tempfile.mkdtemp(prefix="vigil-slurmg-"))
    cluster = GpuNodeCluster(root, cluster_name="vigilgpu", nodes=("gn1", "gn2"))
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
