"""Compute threads that follow the CPUs actually free (issue 38).

Torch's CPU kernels run parallel regions over ``torch.get_num_threads()`` OpenMP threads, each region ending at a
barrier. With as many threads as cores and another CPU-bound process on one of them, every region waits for the thread
whose core the scheduler gave away: measured on 2 cores, SFT ran 12-18x slower beside one other process, far past
the fair 2x (``bench/bench_threads.py`` prints the figures). So the thread count follows the CPUs free of *other*
work: ``ThreadGovernor.adjust`` (called at every SFT step, RL update and rollout turn; it re-measures at most every
``every_s`` seconds) reads the busy time of this process's CPUs from ``/proc/stat``, subtracts this process's own CPU
time, and sets ``threads = CPUs - round(busy of others)`` (at least 1).

Where it stays out: ``OMP_NUM_THREADS`` set in the environment or ``model.threads > 0`` (a fixed count, e.g. for
bitwise-reproducible runs: thread count can change float summation order), or no ``/proc/stat`` (not Linux).
"""

from __future__ import annotations

import os
import time
from typing import Optional

USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def busy_seconds(cpus: list[int], stat: str = "/proc/stat") -> Optional[float]:
    """CPU-seconds spent busy (everything but idle and iowait) on ``cpus`` since boot; None where unreadable.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "stat"
    >>> _ = p.write_text("cpu  9 0 9 9 0 0 0 0\\ncpu0 100 0 50 1000 10 0 0 0\\ncpu1 200 0 0 900 0 0 0 0\\n")
    >>> busy_seconds([0, 1], str(p)) == (150 + 200) / USER_HZ
    True
    """
    try:
        with open(stat) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = {f"cpu{i}" for i in cpus}
    total = 0
    for line in lines:
        parts = line.split()
        if parts and parts[0] in want:
            vals = [int(x) for x in parts[1:9]]
            total += sum(vals) - vals[3] - vals[4]  # minus idle, iowait
    return total / USER_HZ


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def free_threads(n_cpus: int, others_busy: float) -> int:
    """Threads for the CPUs others leave free (at least 1).

    >>> free_threads(2, 0.1), free_threads(2, 0.97), free_threads(2, 2.0), free_threads(16, 3.4)
    (2, 1, 1, 13)
    """
    return max(1, n_cpus - int(round(others_busy)))


class ThreadGovernor:
    """Sets ``torch.set_num_threads`` to the CPUs free of other processes' work, re-measured every ``every_s``."""

    def __init__(self, fixed: int = 0, every_s: float = 2.0):
        self.cpus = allowed_cpus()
        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        self.fixed = fixed or (int(env) if env.isdigit() and int(env) > 0 else 0)
        self.every_s = every_s
        self.last: Optional[tuple[float, float, float]] = None
        self.threads = 0
        self.changes = 0

    def _sample(self) -> Optional[tuple[float, float, float]]:
        busy = busy_seconds(self.cpus)
        return None if busy is None else (time.monotonic(), busy, own_cpu_seconds())

    def adjust(self) -> int:
        """The thread count now in force (changed when the free CPUs changed since the last measurement)."""
        import torch

        if self.fixed:
            if torch.get_num_threads() != self.fixed:
                torch.set_num_threads(self.fixed)
            return self.fixed
        now = self._sample()
        if now is None:
            return torch.get_num_threads()
        if self.last is None:
            self.last = now
            return torch.get_num_threads()
        wall = now[0] - self.last[0]
        if wall < self.every_s:
            return self.threads or torch.get_num_threads()
        others = max(0.0, (now[1] - self.last[1]) - (now[2] - self.last[2])) / wall
        self.last = now
        n = free_threads(len(self.cpus), others)
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
            self.changes += 1
        self.threads = n
        return n


_GOVERNOR: Optional[ThreadGovernor] = None


def follow_free_cpus(fixed: int = 0) -> int:
    """``ThreadGovernor.adjust`` of this process's governor (made on first call); cheap to call often."""
    global _GOVERNOR
    if _GOVERNOR is None or (fixed and _GOVERNOR.fixed != fixed):
        _GOVERNOR = ThreadGovernor(fixed)
    return _GOVERNOR.adjust()
