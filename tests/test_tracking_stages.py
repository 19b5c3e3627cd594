"""Every stage tracks a wandb run and logs what it produces as an Artifact (issue 42); the rl stage is two Dagster
assets, ``rl_checkpoint`` and ``flat_grpo_checkpoint``.

Offline runs are read back from their ``run-*.wandb`` files (the records wandb would sync)."""

import dataclasses
import json
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.wandb_records import wandb_records

TINY = ["experiment=demo", "env.train_seeds=[1,6]", "collect.random_episodes=4", "collect.workers=1"]


def _run(wandb_dir: Path, run_id: str, until=lambda recs: any(r.HasField("exit") for r in recs)) -> dict:
    """What the offline run ``run_id`` recorded: artifacts by name, the last summary, the exit code (waits, bounded,
    for wandb's service to flush the file)."""
    [run_file] = wandb_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    deadline = time.time() + 60
    while not until(recs := wandb_records(run_file)) and time.time() < deadline:
        time.sleep(0.5)
    arts = {r.artifact.name: r.artifact for r in recs if r.HasField("artifact")}
    summary = {}
    for r in recs:
        if r.HasField("summary"):
            summary.update({u.key: json.loads(u.value_json) for u in r.summary.update})
    exits = [r.exit.exit_code for r in recs if r.HasField("exit")]
    return {"artifacts": arts, "summary": summary, "exit": exits[-1] if exits else None,
            "job_type": next((r.run.job_type for r in recs if r.HasField("run")), None)}


def _refs(art) -> dict:
    return {c.path: c.ref for c in art.manifest.contents}


# ---------------------------------------------------------------------------------------------- tracker


def test_reference_artifacts_record_checksums_and_upload_nothing(tmp_path, monkeypatch):
    """A model folder by reference (``file://``, each file's size and md5; no copy anywhere), small files as files,
    credential-like metadata dropped; a null tracker does nothing."""
    from pipeline.config import load_config
    from talentrl_core.tracking import NullTracker, start_run

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wbdata"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wbcache"))
    model = tmp_path / "models" / "rl"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(os.urandom(3 * 2**20))
    report = tmp_path / "report.md"
    report.write_text("# report\n")
    cfg = load_config([f"artifacts_dir={tmp_path / 'art'}"])
    with start_run(cfg, "rl") as t:
        assert t.log_artifact("demo-model-talentrl", "model", references=[model],
                              metadata={"library_version": 2, "hf_token": "secret"}) == "demo-model-talentrl"
        assert t.log_artifact("demo evaluation", "evaluation", files=[report]) == "demo-evaluation"
    run = _run(tmp_path / "wb", t.run_id)
    model_art, eval_art = run["artifacts"]["demo-model-talentrl"], run["artifacts"]["demo-evaluation"]
    assert model_art.type == "model" and eval_art.type == "evaluation"
    assert _refs(model_art) == {"config.json": (model / "config.json").as_uri(),
                                "model.safetensors": (model / "model.safetensors").as_uri()}
    assert {c.path: c.size for c in model_art.manifest.contents}["model.safetensors"] == 3 * 2**20
    assert json.loads(model_art.metadata) == {"library_version": 2}  # hf_token redacted
    assert _refs(eval_art) == {"report.md": ""}  # a file, uploaded at sync
    copied = sum(p.stat().st_size for d in ("wb", "wbdata", "wbcache") for p in (tmp_path / d).rglob("*") if p.is_file())
    assert copied < 2**20, "reference artifacts must not copy the weights"
    assert NullTracker().log_artifact("x", "model", references=[model]) is None


def test_an_artifact_that_cannot_be_logged_is_a_warning(tmp_path, capsys):
    from talentrl_core.tracking import WandbTracker

    class Run:
        id, url, dir = "r1", None, None

        def log_artifact(self, art):
            raise OSError("disk gone")

    (tmp_path / "w").write_text("x")
    assert WandbTracker(Run()).log_artifact("m", "model", references=[tmp_path / "w"]) is None
    assert "wandb: artifact m (model) not logged: OSError: disk gone" in capsys.readouterr().err
    assert WandbTracker(Run()).log_artifact("m", "model", references=[tmp_path / "gone"]) is None
    assert "must be a valid file or directory path" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- stages


def test_collect_and_distill_track_runs_and_log_dataset_and_library(tmp_path, monkeypatch, session_cache):
    from pipeline.config import load_config
    from talentrl_core.stages import collect, distill

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    cfg = load_config([*TINY, f"artifacts_dir={tmp_path / 'art'}", f"env.cache_dir={session_cache}"])
    c = collect(cfg)
    d = distill(cfg)
    assert c["wandb_mode"] == d["wandb_mode"] == "offline"

    run = _run(tmp_path / "wb", c["wandb_run_id"])
    assert run["job_type"] == "collect" and run["exit"] == 0
    s = run["summary"]
    assert s["collect/episodes"] == c["episodes"] and s["collect/errors"] == 0
    for strategy, m in c["strategies"].items():
        assert s[f"collect/{strategy}/episodes"] == m["episodes"]
        assert s[f"collect/{strategy}/success_rate"] == m["success_rate"]
        assert s[f"collect/{strategy}/errors"] == m["errors"]
    assert s["collect/random/episodes"] == 4
    art = run["artifacts"]["demo-trajectories-textworld"]
    assert art.type == "dataset"
    assert {Path(f).name for f in c["files"] + c["random"]["files"]} <= {Path(p).name for p in _refs(art)}

    run = _run(tmp_path / "wb", d["wandb_run_id"])
    assert run["job_type"] == "distill" and run["exit"] == 0
    s = run["summary"]
    assert s["distill/version"] == d["version"] == 1
    assert s["distill/talents"] == d["n_talents"] >= 2
    assert s["distill/skills"] == sum(d["skills"]["per_kind"].values()) > 0
    lib = run["artifacts"]["demo-library"]
    assert lib.type == "library" and json.loads(lib.metadata)["library_version"] == 1
    refs = _refs(lib)
    assert refs and all(r.startswith(Path(cfg.library.uri).resolve().as_uri() + "/") for r in refs.values())


class Recorder:
    """A tracker that records its calls."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a, **k: self.calls.append((name, a, k))


def test_models_and_report_are_logged_by_reference(tmp_path):
    from pipeline.config import load_config
    from talentrl_core.stage_logs import REPORT_UPLOAD_MAX_BYTES, log_model, log_report

    cfg = load_config(["experiment=demo", f"artifacts_dir={tmp_path}"])
    rec = Recorder()
    log_model(rec, cfg, "flat_grpo", tmp_path / "models" / "flat_grpo", {"library_version": 1, "steps": 4,
                                                                          "history": [1, 2], "wandb_run_id": "x"})
    [(_, (name, kind), kw)] = rec.calls
    assert (name, kind, kw["references"]) == ("demo-model-flat_grpo", "model", [tmp_path / "models" / "flat_grpo"])
    assert kw["metadata"]["library_version"] == 1 and kw["metadata"]["system"] == "flat_grpo"
    assert "history" not in kw["metadata"] and "wandb_run_id" not in kw["metadata"]

    (tmp_path / "report.md").write_text("# r")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "episodes.jsonl").write_bytes(b"x" * (REPORT_UPLOAD_MAX_BYTES + 1))
    rec = Recorder()
    files = {n: str(tmp_path / n) for n in ("report.md", "metrics.json", "episodes.jsonl")}
    log_report(rec, cfg, {"files": files, "metrics": {"systems": {"talentrl": {}}}, "skipped": {}})
    [(_, (name, kind), kw)] = rec.calls
    assert (name, kind) == ("demo-evaluation", "evaluation")
    assert sorted(p.name for p in kw["files"]) == ["metrics.json", "report.md"]
    assert [p.name for p in kw["references"]] == ["episodes.jsonl"]


class Tracker:
    """A tracker that refuses artifacts once finished, as a wandb run does."""

    def __init__(self):
        self.finished, self.artifacts = [], []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.finish(1 if exc_type else 0)

    def log(self, *a, **k):
        pass

    def metadata(self):
        return {"wandb_run_id": "r"}

    def finish(self, exit_code=0):
        self.finished.append(exit_code)

    def log_artifact(self, name, kind, references=(), files=(), metadata=None):
        assert not self.finished, "log_artifact on a finished run"
        self.artifacts.append((name, kind, [str(r) for r in references]))
        return name


def test_rl_logs_its_model_on_the_run_the_stage_owns(monkeypatch, tmp_path):
    """train_rl logs to the tracker it is given and leaves finishing it to its owner (the stage's ``with``), which
    logs the model artifact after training and finishes the run once."""
    import talentrl_core.knowledge
    import talentrl_core.rl.trainer as trainer
    import talentrl_core.stages as stages
    from pipeline.config import load_config

    tracker = Tracker()

    class FakeTrainer:
        files = type("Files", (), {"finished": staticmethod(lambda job: None)})()  # nothing finished earlier

        def __init__(self, *a, **k):
            pass

        def job(self):
            return {}

        def run(self, started=None):
            tracker.log({"rl/loss": 1.0}, step=1)
            return {"steps": 4}

    monkeypatch.setattr(trainer, "RLTrainer", FakeTrainer)
    monkeypatch.setattr(talentrl_core.knowledge, "open_knowledge", lambda lib, flat=False: type("K", (), {"version": 3})())
    monkeypatch.setattr(stages, "family_for", lambda cfg: None)
    monkeypatch.setattr(stages, "_tracker", lambda cfg, stage: tracker)
    cfg = load_config(["experiment=demo", f"artifacts_dir={tmp_path}"])
    assert trainer.train_rl(cfg, None, None, "init", tmp_path / "x", tracker) == {"steps": 4} and not tracker.finished
    meta = stages.rl(dataclasses.replace(cfg, rl=cfg.rl.as_flat_baseline()))
    assert tracker.artifacts == [("demo-model-flat_grpo", "model", [str(tmp_path / "models" / "flat_grpo")])]
    assert tracker.finished == [0] and meta["wandb_run_id"] == "r" and meta["steps"] == 4


def test_rl_both_trains_both_or_the_systems_asked(monkeypatch, tmp_path):
    import talentrl_core.stages as stages
    from pipeline.config import load_config

    seen = []
    monkeypatch.setattr(stages, "rl", lambda cfg, started=None: seen.append(cfg.rl.flat_baseline) or {"flat": cfg.rl.flat_baseline})
    cfg = load_config([f"artifacts_dir={tmp_path}"])
    assert stages.rl_both(cfg) == {"talentrl": {"flat": False}, "flat_grpo": {"flat": True}} and seen == [False, True]
    assert stages.rl_both(cfg, systems=("flat_grpo",)) == {"flat_grpo": {"flat": True}}
    with pytest.raises(ValueError, match="unknown system"):
        stages.rl_both(cfg, systems=("grpo",))


# ---------------------------------------------------------------------------------------------- Dagster


def test_rl_is_two_assets_trained_together_or_alone(tmp_path, monkeypatch):
    """``rl_checkpoint`` and ``flat_grpo_checkpoint``: one step trains both when both are selected (the stage as
    pipeline.run and dvc repro run it), the selected one alone otherwise; each has its own data version."""
    import talentrl_core.stages
    from assets.dvc_hash import dir_md5
    from assets.stage_assets import ASSETS_OF_STAGE
    from pipeline.definitions import defs

    calls = []

    def fake_rl(cfg, systems=("talentrl", "flat_grpo")):
        calls.append(systems)
        out = {}
        for system, folder in (("talentrl", "rl"), ("flat_grpo", "flat_grpo")):
            if system in systems:
                d = Path(cfg.artifacts_dir) / "models" / folder
                d.mkdir(parents=True, exist_ok=True)
                (d / "weights").write_text(f"{system} {len(calls)}")
                out[system] = {"checkpoint": str(d), "steps": 4}
        return out

    monkeypatch.setitem(talentrl_core.stages.STAGES, "rl", fake_rl)

    def materialise(*keys):
        result = defs.resolve_job_def("talentrl_chain").execute_in_process(
            run_config={"resources": {"talentrl": {"config": {"overrides": [f"artifacts_dir={tmp_path}"]}}}},
            instance=dg.DagsterInstance.ephemeral(), asset_selection=[dg.AssetKey(k) for k in keys],
            raise_on_error=False)  # the blocking checks fail on these fake weights; the materialisations stand
        events = result.get_asset_materialization_events()  # what pipeline.demo should read (not node names)
        assert {e.asset_key.to_user_string() for e in events} == set(keys)
        return {m.asset_key.to_user_string(): m for m in result.asset_materializations_for_node("rl")}

    both = materialise("rl_checkpoint", "flat_grpo_checkpoint")
    assert calls == [("talentrl", "flat_grpo")] and set(both) == {"rl_checkpoint", "flat_grpo_checkpoint"}
    assert both["rl_checkpoint"].tags["dagster/data_version"] == dir_md5(tmp_path / "models" / "rl")
    assert both["flat_grpo_checkpoint"].tags["dagster/data_version"] == dir_md5(tmp_path / "models" / "flat_grpo")
    assert both["flat_grpo_checkpoint"].metadata["steps"].value == 4

    alone = materialise("flat_grpo_checkpoint")
    assert calls[-1] == ("flat_grpo",) and set(alone) == {"flat_grpo_checkpoint"}
    alone = materialise("rl_checkpoint")
    assert calls[-1] == ("talentrl",) and set(alone) == {"rl_checkpoint"}
    materialise(*ASSETS_OF_STAGE["rl"])  # what selecting the rl stage (pipeline.demo) should name
    assert calls[-1] == ("talentrl", "flat_grpo")
