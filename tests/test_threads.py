"""Compute threads follow the CPUs free of other work (talentrl_core/threads.py; bench/bench_threads.py times it)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from talentrl_core.threads import ThreadGovernor, allowed_cpus, busy_seconds


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.skipif(busy_seconds(allowed_cpus()) is None or len(allowed_cpus()) < 2, reason="needs /proc/stat and 2 CPUs")
def test_a_busy_process_takes_a_thread_and_a_fixed_count_stays(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    gov = ThreadGovernor(every_s=0.5)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        gov.adjust()  # first sample
        time.sleep(1.5)  # this process idles; the hog holds one CPU
        n = gov.adjust()
    finally:
        hog.kill()
        hog.wait()
    assert n <= len(allowed_cpus()) - 1 and torch.get_num_threads() == n
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ThreadGovernor().adjust() == 1 == torch.get_num_threads()
    assert ThreadGovernor(fixed=2).adjust() == 2 == torch.get_num_threads()
