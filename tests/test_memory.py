"""Freed memory kept for reuse (talentrl_core.memory): a large block freed and allocated again faults in no new
pages, where glibc's defaults unmap it on free and fault every page in again. (What it saves a training step is
measured by bench/bench_alloc.py.)"""

import json
import os
import subprocess
import sys

PROBE = """
import ctypes, ctypes.util, json, resource, sys
from talentrl_core.memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
size, faults = 64 * 2**20, []  # 64 MiB: above glibc's largest mmap threshold
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults}))
"""
PAGES = 64 * 2**20 // 4096


def probe(mode: str, opt_in: str = "1") -> dict:
    env = {**os.environ, "TALENTRL_KEEP_FREED_MEMORY": opt_in}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_freed_block_is_reused_without_new_page_faults():
    default, kept = probe("default"), probe("keep")
    assert not default["kept"] and kept["kept"]
    assert min(default["faults"]) > PAGES // 2  # unmapped on free: every page faulted in again each time
    assert kept["faults"][0] > PAGES // 2 and max(kept["faults"][1:]) < PAGES // 10  # then reused as it is


def test_it_is_off_unless_asked_for():
    assert probe("keep", opt_in="")["kept"] is False and probe("keep", opt_in="0")["kept"] is False
