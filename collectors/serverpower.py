"""Measured whole-server power for the node row (`server_power_w`), from the BMC.

Two sources, chosen by `--server-power`:

- `ipmi`: `ipmitool dcmi power reading` on the node (in-band, through /dev/ipmi0; needs root
  or access to that device). DCMI's "Instantaneous power reading" is the server's input power.
- `redfish:URL`: a Redfish `Power` resource, e.g. `https://bmc/redfish/v1/Chassis/1/Power`;
  `PowerControl[0].PowerConsumedWatts` (DMTF Power schema). Basic-auth credentials only from
  the environment (VIGIL_REDFISH_USER, VIGIL_REDFISH_PASSWORD); VIGIL_REDFISH_CA_FILE names the
  certificate to trust for a BMC's self-signed one.
- `auto` (default): `ipmi` when ipmitool is installed and an IPMI device exists, else none.

A reading that fails or that the BMC marks inactive is null, never 0: a missing measurement
must not look like an idle server (the same rule as the GPU energy counter). The first failure
is logged, then silence until the source answers again.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("vigil.collector.serverpower")

IPMI_COMMAND = ("ipmitool", "dcmi", "power", "reading")
# The in-band IPMI device nodes of the Linux ipmi_devintf driver (and its older names).
IPMI_DEVICES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")
# A BMC answers in well under a second; a hung one must not stall the sampling round long.
TIMEOUT_S = 3.0
# Larger than any single server's input power: an 8-GPU H100 server is rated about 10.2 kW
# (NVIDIA DGX H100 datasheet, max system power); readings above this are garbage.
MAX_SERVER_W = 20_000.0

_IPMI_READING = re.compile(r"^\s*Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.M | re.I)
_IPMI_STATE = re.compile(r"^\s*Power reading state is:\s*(\w+)", re.M | re.I)


def parse_ipmitool_dcmi(text: str) -> float | None:
    """Watts from `ipmitool dcmi power reading`; None when absent or the BMC says the reading
    is deactivated (its numbers are then stale or placeholders)."""
    state = _IPMI_STATE.search(text)
    if state and state.group(1).lower() != "activated":
        return None
    m = _IPMI_READING.search(text)
    if m is None:
        return None
    return _plausible(float(m.group(1)))


def parse_redfish_power(doc: Any) -> float | None:
    """Watts from a Redfish Power resource: PowerControl[0].PowerConsumedWatts (None if the
    member or the value is missing, null or not a number, or the member is not enabled)."""
    try:
        control = doc["PowerControl"][0]
        value = control["PowerConsumedWatts"]
    except (KeyError, IndexError, TypeError):
        return None
    state = (control.get("Status") or {}).get("State") if isinstance(control, dict) else None
    if state not in (None, "Enabled"):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return _plausible(float(value))


def _plausible(watts: float) -> float | None:
    # Zero is not a server's power: some BMCs advertise DCMI and never fill it in.
    return watts if 0 < watts <= MAX_SERVER_W else None


class ServerPowerReader(Protocol):
    name: str

    def read_w(self) -> float | None: ...


class _Quiet:
    """Log the first failure and the recovery, not every round."""

    name = "server power"

    def __init__(self) -> None:
        self._failing = False

    def _failed(self, why: str) -> None:
        if not self._failing:
            log.warning("%s not readable: %s (server_power_w stays null)", self.name, why)
        self._failing = True

    def _ok(self, watts: float | None) -> float | None:
        if watts is None:
            self._failed("no active reading")
        elif self._failing:
            log.warning("%s answers again", self.name)
            self._failing = False
        return watts


class IpmiReader(_Quiet):
    def __init__(self, command: Sequence[str] = IPMI_COMMAND, timeout_s: float = TIMEOUT_S):
        super().__init__()
        self.command = list(command)
        self.timeout_s = timeout_s
        self.name = " ".join(self.command)

    def read_w(self) -> float | None:
        try:
            done = subprocess.run(  # noqa: S603 (a fixed argv, no shell)
                self.command, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._failed(str(exc))
            return None
        if done.returncode != 0:
            self._failed(f"exit {done.returncode}: {done.stderr.strip()[:200]}")
            return None
        return self._ok(parse_ipmitool_dcmi(done.stdout))


class RedfishReader(_Quiet):
    def __init__(
        self,
        url: str,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        super().__init__()
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"redfish URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.name = f"Redfish {url}"
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if user:
            pair = f"{user}:{password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def read_w(self) -> float | None:
        request = urllib.request.Request(self.url, headers=self._headers)  # noqa: S310
        try:
            with urllib.request.urlopen(  # noqa: S310 (http/https checked above)
                request, timeout=self.timeout_s, context=self._context
            ) as resp:
                doc = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            self._failed(f"HTTP {exc.code}")
            return None
        except (OSError, ValueError) as exc:
            self._failed(str(exc))
            return None
        return self._ok(parse_redfish_power(doc))


def ipmi_available(devices: Sequence[str] = IPMI_DEVICES) -> bool:
    return shutil.which(IPMI_COMMAND[0]) is not None and any(Path(d).exists() for d in devices)


def server_power_reader(
    spec: str, environ: dict[str, str] | None = None
) -> ServerPowerReader | None:
    """The reader `--server-power` names: ipmi, redfish:URL, auto or none (ValueError if not)."""
    env = os.environ if environ is None else environ
    if spec == "none":
        return None
    if spec == "auto":
        return IpmiReader() if ipmi_available() else None
    if spec == "ipmi":
        return IpmiReader()
    if spec.startswith("redfish:"):
        return RedfishReader(
            spec.removeprefix("redfish:"),
            user=env.get("VIGIL_REDFISH_USER") or None,
            password=env.get("VIGIL_REDFISH_PASSWORD") or None,
            ca_file=env.get("VIGIL_REDFISH_CA_FILE") or None,
        )
    raise ValueError(f"--server-power {spec!r}: expected ipmi, redfish:URL, auto or none")
