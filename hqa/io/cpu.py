"""CPU seconds of processes, for the throughput measurements (``benchmarks/bench_throughput.py``) and the Ray
workers' own account (:meth:`hqa.jobs.ray_engine.Worker.usage`): another process's from ``/proc`` (Linux; 0 where it
cannot be read), this process's with its child processes (the SPARQL store's worker processes do hqa's work too)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["child_pids", "own_cpu_seconds", "process_cpu_seconds", "tree_cpu_seconds"]


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, from ``/proc`` (0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids() -> set[int]:
    """The live child processes of this process (every thread's)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").glob("*"):
        try:
            pids.update(int(x) for x in (task / "children").read_text().split())
        except OSError:
            continue
    return pids


def tree_cpu_seconds(exclude: tuple[int, ...] = (), own: bool = True) -> float:
    """CPU seconds of this process (unless not ``own``) and its child processes but ``exclude``: the live ones,
    plus those already waited for (``RUSAGE_CHILDREN``)."""
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ended.ru_utime + ended.ru_stime + (own_cpu_seconds() if own else 0.0)
    return cpu + sum(process_cpu_seconds(pid) for pid in child_pids() - set(exclude))
