"""The client host's fingerprint: CPU model, logical CPUs, platform and load average, so a
comparison of two runs can show that one client ran on a slower or busier machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from servingctl.schema.results import ClientHost

CPUINFO = Path("/proc/cpuinfo")


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo; elsewhere platform.processor(), None if unknown)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def load_average() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages, rounded (None where the OS has none)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return None
    return round(one, 2), round(five, 2), round(fifteen, 2)


def client_host() -> ClientHost:
    """This machine as the run starts (load_average_end is filled when it ends)."""
    return ClientHost(
        cpu_model=cpu_model(), cpus=os.cpu_count(), platform=platform.platform(terse=True), load_average_start=load_average()
    )
