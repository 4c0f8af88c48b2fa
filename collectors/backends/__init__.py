"""Telemetry sources of the node agent: nvml, dcgm, simulated (see base.Backend)."""
