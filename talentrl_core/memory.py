"""Keep freed memory in the process instead of handing it back to the OS after every micro-batch.

glibc serves a block above its mmap threshold (dynamic, at most 32 MiB) with its own ``mmap`` and unmaps it when the
block is freed. A CPU training step frees and allocates the same large activations every micro-batch, so each one
touches fresh pages: a minor page fault and a zeroed page per 4 KiB, in the kernel. Measured during WebShop's SFT on
2 cores: 546,000 faults a second, 42% of the process's CPU time in the kernel (``bench/bench_alloc.py`` prints the
figures against glibc's defaults). ``keep_freed_memory`` sets, through ``mallopt``, no mmap for large blocks and no
trimming of the heap's top, so a freed block is reused by the next micro-batch as it is; the process's resident
memory stays at its peak instead of falling between steps. The same as the environment variables
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...``, set from inside the process (they are read only at start-up).

Off unless ``TALENTRL_KEEP_FREED_MEMORY=1``: on the bench's fixed-size steps it adds 7% to sdpa's speed, but in
WebShop's SFT, whose samples vary in length, the heap fragmented (no block is ever given back): resident memory grew
8.4 -> 11.6 GB over 150 steps while the step time rose 6 -> 9 s (2026-12-06). Also off where it cannot work (not
glibc: macOS, musl have no ``mallopt``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # malloc.h
M_MMAP_MAX = -4
_DONE: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed blocks for reuse (idempotent) where ``TALENTRL_KEEP_FREED_MEMORY=1``; else False."""
    global _DONE
    if _DONE is not None:
        return _DONE
    _DONE = False
    if os.environ.get("TALENTRL_KEEP_FREED_MEMORY", "0").strip() != "1":
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _DONE = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    return _DONE
