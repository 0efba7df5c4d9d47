"""What the kernel says about a process and the machine: CPU time, resident memory, CPU pressure.

Read from ``/proc`` so the benchmarks measure the real server processes from
outside, without instrumenting them.  Linux only, like the services.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat, after the parenthesised name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_stall_seconds() -> float | None:
    """The machine's cumulative "some" CPU pressure stall time (PSI), or None without PSI."""
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return int(some.rpartition("total=")[2]) / 1e6


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB, from /proc/<pid>/status."""
    values = {"VmRSS": 0, "VmHWM": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in values:
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def cpu_ticks() -> tuple[int, int]:
    """The machine's (steal, total) CPU time in clock ticks since boot, from the ``cpu`` line of /proc/stat.

    Steal is time this virtual machine wanted a CPU while the hypervisor ran someone else: the share of
    a run it took is how much the host, not the code, slowed that run (0 on bare metal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU time the hypervisor stole between two :func:`cpu_ticks` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages: how busy the machine was around a measurement."""
    return os.getloadavg()
