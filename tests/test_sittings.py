"""The experiment runners in sittings (``docs/results/sitting.sh`` and the runners that source it): a finished stage
writes its marker and is skipped by the next call, a paused or failed stage stops the runner with its exit code and
writes none, and no stage starts without the minutes its budget needs. The runners run here with a stand-in for the
venv's python that records each call and exits as told."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = ["docs/results/alfworld/chain.sh", "docs/results/alfworld/sizes.sh", "docs/results/webshop/p6.sh", "docs/results/webshop/p7.sh",
           "docs/results/routing/a2_draws.sh"]


def run(runner: str, runs: Path, minutes: int, fail_on: str = "") -> subprocess.CompletedProcess:
    """``runner`` with the sitting ending in ``minutes``; the stand-in python exits 75 (paused) on a call naming
    ``fail_on``, 0 otherwise."""
    fake = runs / "python"
    fake.write_text('#!/bin/bash\necho "$*" >> "$RUNS/calls"\n'
                    'if [ -n "$FAIL_ON" ] && [[ "$*" == *"$FAIL_ON"* ]]; then exit 75; fi\n'
                    'if [ "$1" = - ]; then cat > /dev/null; echo "met 50/80[0.5,0.7]"; fi\n')  # a criterion read
    for d in ("trajectories", "library", "models/base"):  # what p7.sh links from P6's folder
        (runs / "ws_p6" / d).mkdir(parents=True, exist_ok=True)
    fake.chmod(0o755)
    end = (dt.datetime.now() + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M")
    env = dict(os.environ, RUNS=str(runs), PY=str(fake), FAIL_ON=fail_on)
    return subprocess.run(["bash", str(ROOT / runner), end], env=env, capture_output=True, text=True, timeout=60)


def calls(runs: Path) -> list[str]:
    """Each call's arguments, the runs folder written ``$RUNS``."""
    path = runs / "calls"
    return path.read_text().replace(str(runs), "$RUNS").splitlines() if path.exists() else []


def unbudgeted(cs: list[str]) -> list[str]:
    """Calls with their minutes' budgets masked: a run that crosses a minute boundary gives its later stages one
    minute less, which is not what these tests read."""
    return [re.sub(r"max_minutes=\d+", "max_minutes=M", c) for c in cs]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_runner_resumes_past_its_finished_stages(runner, tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    assert run(runner, whole, 60).returncode == 0
    every = unbudgeted(calls(whole))  # each stage's call, in order
    assert len(every) >= 4 and len(set(every)) == len(every)

    runs = tmp_path / "sittings"
    runs.mkdir()
    second = every[1].split("max_minutes=")[0].replace("$RUNS", str(runs))  # up to its budget, if it has one
    paused = run(runner, runs, 60, fail_on=second)  # the second stage pauses (exit 75)
    assert paused.returncode == 75, paused.stderr
    assert unbudgeted(calls(runs)) == every[:2]
    assert len(list(runs.glob("*.done.*"))) == 1  # the paused stage wrote no marker
    assert "rc=75" in next(runs.glob("*.log")).read_text()

    done = run(runner, runs, 60)
    assert done.returncode == 0, done.stderr
    # the finished stage skipped, the rest run once (stages run together, chain.sh's two evaluations, in either order)
    assert sorted(unbudgeted(calls(runs))[2:]) == sorted(every[1:])
    again = run(runner, runs, 60)
    assert again.returncode == 0 and len(calls(runs)) - len(every) - 1 <= 1  # at most p6's criterion read again


def test_no_stage_starts_without_the_minutes_its_budget_needs(tmp_path):
    late = run("docs/results/alfworld/chain.sh", tmp_path, 3)
    assert late.returncode == 0 and calls(tmp_path) == []
    assert "no time for collect" in next(tmp_path.glob("*.log")).read_text()


def test_the_budget_given_to_a_stage_is_the_sittings_minutes_less_four(tmp_path):
    run("docs/results/alfworld/chain.sh", tmp_path, 30, fail_on="pipeline.run sft")
    (sft,) = [c for c in calls(tmp_path) if c.split()[1:3] == ["pipeline.run", "sft"]]
    budget = int(sft.split("sft.max_minutes=")[1].split()[0])
    assert 24 <= budget <= 26


def test_a_second_sitting_of_a_running_runner_starts_nothing(tmp_path):
    """A sitting started under nohup outlives its shell: a second call while one runs (here: its lock held) exits 3
    with the lock's path named, and calls no stage."""
    lock = tmp_path / "alf_d.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running sitting holds it (flock(1) on fd 9)
        second = run("docs/results/alfworld/chain.sh", tmp_path, 60)
    assert second.returncode == 3 and str(lock) in second.stderr
    assert calls(tmp_path) == []
    assert run("docs/results/alfworld/chain.sh", tmp_path, 60).returncode == 0  # the lock released: it runs
