"""``python -m pipeline.run`` speaks Hydra's command line: multirun sweeps into per-job artifact folders,
``--cfg job``, ``--info``; every override (each sweep combination) is validated before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import talentrl_core.stages as stages_mod
from pipeline.run import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_sft(monkeypatch):
    seen = []

    def fake(cfg):
        seen.append(cfg)
        (Path(cfg.artifacts_dir) / "models" / "sft").mkdir(parents=True, exist_ok=True)
        return {"lr": cfg.sft.lr}

    monkeypatch.setitem(stages_mod.STAGES, "sft", fake)
    return seen


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipeline.run", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_multirun_runs_each_config_in_its_own_artifacts_dir(tmp_path, fake_sft, capsys):
    art = tmp_path / "art"
    (art / "library").mkdir(parents=True)
    (art / "models" / "base").mkdir(parents=True)
    (art / "models" / "sft").mkdir(parents=True)  # the stage's own output: not linked into the jobs
    assert main(["sft", "-m", "sft.lr=0.001,0.003", f"artifacts_dir={art}", "tracker.mode=disabled"]) == 0
    assert [c.sft.lr for c in fake_sft] == [0.001, 0.003]
    dirs = [Path(c.artifacts_dir) for c in fake_sft]
    assert len(set(dirs)) == 2 and all(d.parent.parent == art / "multirun" for d in dirs)
    for d in dirs:
        assert (d / "library").is_symlink() and (d / "library").resolve() == (art / "library").resolve()
        assert (d / "models" / "base").is_symlink()
        assert (d / "models" / "sft").is_dir() and not (d / "models" / "sft").is_symlink()
        assert yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())[0].startswith("sft.lr=")
    out = capsys.readouterr()
    assert [ln for ln in out.out.splitlines() if ln.strip()] == ['{"lr": 0.001}', '{"lr": 0.003}']  # JSON alone
    assert "Launching 2 jobs" in out.err


def test_a_bad_combination_stops_the_sweep_before_any_job(tmp_path, fake_sft, capsys):
    assert main(["sft", "-m", "sft.lr=0.001,0.002", "sft.max_steps=10,0", f"artifacts_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and "max_steps" in err and "sweep combination" in err
    assert fake_sft == []


def test_cfg_job_prints_the_composed_config_and_runs_nothing(tmp_path):
    proc = _cli("sft", "experiment=demo", "sft.lr=0.007", "--cfg", "job", f"artifacts_dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["sft"]["lr"] == 0.007 and cfg["experiment"] == "demo"
    assert not (tmp_path / "models").exists()


def test_info_and_unknown_added_key_and_stage(tmp_path):
    proc = _cli("collect", "--info")
    assert proc.returncode == 0 and "Hydra" in proc.stdout, proc.stderr
    proc = _cli("collect", "+sft.nope=1", f"artifacts_dir={tmp_path}")
    assert proc.returncode == 2 and "unknown config key 'sft.nope'" in proc.stderr
    proc = _cli("colect")
    assert proc.returncode == 2 and "unknown stage 'colect'" in proc.stderr and "collect" in proc.stderr
