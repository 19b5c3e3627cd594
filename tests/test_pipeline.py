"""Orchestration: Dagster definitions, the stage CLI, schedule and sensor, DVC hashes and lock, tracking,
and a real webserver launching a run through GraphQL.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets.dvc_hash import IGNORED, dir_md5, dvc_md5, file_md5
from assets.stage_assets import GPU_OP_TAGS, output_of, output_of_asset
from talentrl_core.stages import STAGES
from tests.wandb_records import wandb_records

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _run(args, cwd=ROOT, timeout=300, **kw):
    env = dict(os.environ, PATH=f"{Path(PY).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kw)


# ---------------------------------------------------------------------------------------------- definitions


def test_definitions_load_with_assets_checks_job_schedule_sensor():
    from pipeline.definitions import defs

    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"trajectories", "library", "sft_checkpoint", "rl_checkpoint", "flat_grpo_checkpoint", "evaluation"}
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert {a for a, _ in checks} == keys  # one gate per asset
    for ck in graph.asset_check_keys:
        assert graph.get_check_spec(ck).blocking, f"{ck.name} must be blocking"
    parents = {k: {p.to_user_string() for p in graph.get(dg.AssetKey(k)).parent_keys} for k in keys}
    assert parents == {
        "trajectories": set(),
        "library": {"trajectories"},
        "sft_checkpoint": {"library"},
        "rl_checkpoint": {"sft_checkpoint"},
        "flat_grpo_checkpoint": {"sft_checkpoint"},
        "evaluation": {"sft_checkpoint", "rl_checkpoint", "flat_grpo_checkpoint"},
    }
    assert defs.resolve_job_def("talentrl_chain") is not None
    assert defs.resolve_schedule_def("retrain_weekly").cron_schedule == os.environ.get("TALENTRL_RETRAIN_CRON", "0 3 * * 0")
    assert defs.resolve_sensor_def("incoming_trajectories") is not None


def test_gpu_assets_carry_executor_tags():
    from pipeline.definitions import defs

    for name in ("sft_checkpoint", "rl_checkpoint", "flat_grpo_checkpoint"):
        node = defs.resolve_assets_def(name).node_def
        assert node.tags["dagster-celery/queue"] == "gpu"
        k8s = node.tags["dagster-k8s/config"]
        k8s = json.loads(k8s) if isinstance(k8s, str) else k8s
        assert k8s == GPU_OP_TAGS["dagster-k8s/config"]
        assert defs.resolve_assets_def(name).specs_by_key[dg.AssetKey(name)].tags["talentrl/accelerator"] == "gpu"


def test_ui_defaults_to_the_demo_in_named_groups():
    """The launchpad, schedule and sensor run the demo experiment and say so; assets sit in named groups."""
    from pipeline.definitions import RUN_CONFIG, defs

    job = defs.resolve_job_def("talentrl_chain")
    assert job.tags["talentrl/experiment"] == "demo"
    assert RUN_CONFIG["resources"]["talentrl"]["config"]["overrides"] == ["experiment=demo"]
    sched = defs.resolve_schedule_def("retrain_weekly")
    assert sched.tags["talentrl/experiment"] == "demo"
    groups = {k.to_user_string(): g for a in defs.assets for k, g in a.group_names_by_key.items()}
    assert groups == {"trajectories": "collection", "library": "skill_library", "sft_checkpoint": "training",
                      "rl_checkpoint": "training", "flat_grpo_checkpoint": "training", "evaluation": "evaluation"}


def test_a_bad_config_fails_the_step_with_a_readable_description(tmp_path):
    from pipeline.definitions import defs

    result = defs.resolve_job_def("talentrl_chain").execute_in_process(
        run_config={"resources": {"talentrl": {"config": {"overrides": [f"artifacts_dir={tmp_path}", "env.max_stepz=3"]}}}},
        instance=dg.DagsterInstance.ephemeral(), asset_selection=[dg.AssetKey("trajectories")], raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0].step_failure_data
    assert failure.user_failure_data.description.startswith("config error: unknown config key 'env.max_stepz'")


def test_long_steps_report_progress_to_the_run_log():
    from tqdm import tqdm

    import talentrl_core.stages
    from assets.stage_assets import run_stage

    class Log:
        lines: list = []

        def info(self, msg):
            self.lines.append(msg)

    def slow(cfg):
        with tqdm(total=10, desc="episodes", disable=False) as bar:
            for _ in range(10):
                time.sleep(0.05)
                bar.update()
        return {}

    log = Log()
    old = talentrl_core.stages.STAGES["collect"]
    talentrl_core.stages.STAGES["collect"] = slow
    try:
        run_stage("collect", None, log, every=0.1)
    finally:
        talentrl_core.stages.STAGES["collect"] = old
    assert len(log.lines) >= 2 and all(ln.startswith("collect: running") for ln in log.lines)
    assert any("episodes: " in ln and "/10" in ln for ln in log.lines), log.lines


def test_ui_refuses_a_busy_port(capsys):
    from pipeline.ui import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


def test_unknown_deployment_is_refused(monkeypatch):
    from pipeline.resources import deployment_name

    monkeypatch.setenv("TALENTRL_DEPLOYMENT", "moon")
    with pytest.raises(ValueError, match="local"):
        deployment_name()


class StageBroke(RuntimeError):
    pass


def _broken(cfg):
    raise StageBroke("evaluate")


def _materialise_evaluation(tmp_path):
    from pipeline.definitions import defs

    return defs.resolve_job_def("talentrl_chain").execute_in_process(
        run_config={"resources": {"talentrl": {"config": {"overrides": [f"artifacts_dir={tmp_path}"]}}}},
        instance=dg.DagsterInstance.ephemeral(), asset_selection=[dg.AssetKey("evaluation")], raise_on_error=False)


def test_failing_stage_asset_fails_never_faked(tmp_path, monkeypatch):
    """A stage that raises fails the run (the UI shows it red); nothing is recorded."""
    import talentrl_core.stages

    monkeypatch.setitem(talentrl_core.stages.STAGES, "evaluate", _broken)
    result = _materialise_evaluation(tmp_path)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure][0]
    assert failure.step_failure_data.error.cause.cls_name == "StageBroke"
    assert result.asset_materializations_for_node("evaluation") == []


def test_a_paused_stage_asset_is_named_as_paused_not_failed(tmp_path, monkeypatch):
    """A stage that stops at its time budget fails its Dagster step (nothing downstream runs on an unfinished model)
    and ``make demo``/``make alfworld`` read it back as paused (``pipeline.demo.paused_stage``: exit 75, resume)."""
    import talentrl_core.stages
    from pipeline.demo import paused_stage
    from talentrl_core.checkpoints import Paused

    def pause(cfg):
        raise Paused("evaluate paused at step 2 of 5 after sft.max_minutes=1 (checkpoint in x)")

    monkeypatch.setitem(talentrl_core.stages.STAGES, "evaluate", pause)
    result = _materialise_evaluation(tmp_path)
    assert not result.success and result.asset_materializations_for_node("evaluation") == []
    assert paused_stage(result.all_events) == "evaluate paused at step 2 of 5 after sft.max_minutes=1 (checkpoint in x)"
    monkeypatch.setitem(talentrl_core.stages.STAGES, "evaluate", _broken)
    broken = _materialise_evaluation(tmp_path)
    assert paused_stage(broken.all_events) is None


# ---------------------------------------------------------------------------------------------- CLI


def test_run_help_lists_every_stage_with_its_line():
    proc = _run([PY, "-m", "pipeline.run", "--help"])
    assert proc.returncode == 0, proc.stderr
    for stage, spec in STAGES.items():
        line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith(stage + " "))
        assert line.split(None, 1)[1] == spec.doc, line


def test_bad_override_exits_2_naming_the_key():
    proc = _run([PY, "-m", "pipeline.run", "collect", "env.max_stepz=3"])
    assert proc.returncode == 2
    assert "config error" in proc.stderr and "env.max_stepz" in proc.stderr


def test_failing_stage_exits_1_with_one_named_line(monkeypatch, capsys):
    import talentrl_core.stages
    from pipeline.run import main

    monkeypatch.setitem(talentrl_core.stages.STAGES, "evaluate", _broken)
    assert main(["evaluate"]) == 1
    assert "evaluate: error: StageBroke: evaluate" in capsys.readouterr().err


def test_offline_defaults_respect_the_environment(monkeypatch):
    from pipeline.env import offline_defaults

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    offline_defaults()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["WANDB_MODE"] == "online"


# ---------------------------------------------------------------------------------------------- schedule, sensor


def test_schedule_requests_the_chain():
    from pipeline.definitions import defs, retrain_schedule

    with dg.instance_for_test() as instance:
        data = retrain_schedule.evaluate_tick(dg.build_schedule_context(instance=instance, repository_def=defs.get_repository_def()))
    assert len(data.run_requests) == 1
    assert data.run_requests[0].tags["talentrl/trigger"] == "schedule"
    assert retrain_schedule.job_name == "talentrl_chain"


def _tick(sensor, cursor):
    data = sensor.evaluate_tick(dg.build_sensor_context(cursor=cursor))
    return data.run_requests or [], data.cursor if data.cursor is not None else cursor


def test_sensor_runs_once_per_new_parquet_file(tmp_path, monkeypatch):
    from pipeline.definitions import incoming_trajectories

    watch = tmp_path / "incoming"
    monkeypatch.setenv("TALENTRL_WATCH_DIR", str(watch))
    requests, cursor = _tick(incoming_trajectories, None)  # folder missing: skip, no error
    assert requests == []
    (watch / "env=textworld").mkdir(parents=True)
    (watch / "notes.txt").write_text("not a trajectory file")
    requests, cursor = _tick(incoming_trajectories, cursor)
    assert requests == []

    (watch / "env=textworld" / "a.parquet").write_bytes(b"x")
    requests, cursor = _tick(incoming_trajectories, cursor)
    assert len(requests) == 1 and "a.parquet" in requests[0].tags["talentrl/new_files"]
    assert json.loads(cursor)[0][0] == "env=textworld/a.parquet"
    requests, cursor = _tick(incoming_trajectories, cursor)  # second tick: nothing new
    assert requests == []

    (watch / "b.parquet").write_bytes(b"y")
    requests, cursor = _tick(incoming_trajectories, cursor)
    assert len(requests) == 1 and requests[0].tags["talentrl/new_files"] == "b.parquet"
    first_key = requests[0].run_key
    os.utime(watch / "b.parquet", ns=(1, 10**18))  # rewritten file (new mtime): a new run
    requests, cursor = _tick(incoming_trajectories, cursor)
    assert len(requests) == 1 and requests[0].run_key != first_key


# ---------------------------------------------------------------------------------------------- DVC


def _dvc_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    assert _run(["git", "init", "-q"], cwd=path).returncode == 0
    proc = _run([PY, "-m", "dvc", "init", "-q"], cwd=path)
    assert proc.returncode == 0, proc.stderr
    shutil.copy(ROOT / ".dvcignore", path / ".dvcignore")
    return path


def test_dir_hash_equals_dvc(tmp_path):
    repo = _dvc_repo(tmp_path / "repo")
    data = repo / "data"
    (data / "sub" / "deeper").mkdir(parents=True)
    (data / "empty").mkdir()
    (data / "a.txt").write_text("alpha\n")
    (data / "sub" / "b.bin").write_bytes(bytes(range(256)) * 50)
    (data / "sub" / "crlf.txt").write_bytes(b"x\r\ny\r\n")
    (data / "sub" / "deeper" / "ünï.json").write_text('{"k": 1}')
    (data / "__pycache__").mkdir()
    (data / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")  # ignored by .dvcignore
    (repo / "one.txt").write_text("single file\n")
    for target in ("data", "one.txt"):
        proc = _run([PY, "-m", "dvc", "add", "-q", target], cwd=repo)
        assert proc.returncode == 0, proc.stderr
    recorded = {t: yaml.safe_load((repo / f"{t}.dvc").read_text())["outs"][0]["md5"] for t in ("data", "one.txt")}
    assert dir_md5(data) == recorded["data"] == dvc_md5(data)
    assert file_md5(repo / "one.txt") == recorded["one.txt"] == dvc_md5(repo / "one.txt")
    assert "__pycache__" in IGNORED


def test_dvc_yaml_matches_stages_and_assets():
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    from pipeline.config import load_config
    from pipeline.params import compose_params

    assert list(spec["stages"]) == list(STAGES)
    cfg = load_config(["artifacts_dir=artifacts"])
    params = compose_params([])
    for stage, st in spec["stages"].items():  # the stage's outputs in the order of its assets (StageSpec.outputs)
        assert [o if isinstance(o, str) else next(iter(o)) for o in st["outs"]][:len(STAGES[stage].outputs)] == \
            [str(output_of_asset(a, cfg)) for a in STAGES[stage].assets], stage
    for stage, s in spec["stages"].items():
        assert s["cmd"] == f"python -m pipeline.run {stage} --params params.yaml"
        assert "overrides" in s["params"]  # the lock records how params.yaml was composed
        missing = [d for d in s["deps"] if not (ROOT / d).exists() and not d.startswith("artifacts/")]
        assert not missing, f"dvc.yaml stage {stage}: deps {missing} do not exist (renamed?)"
        assert "conf" not in s["deps"]  # each stage lists the code it imports (tests/test_dvc_fresh.py)
        outs = [o if isinstance(o, str) else next(iter(o)) for o in s["outs"]]
        assert str(output_of(stage, cfg)) == outs[0]  # the asset's data version is this out's md5
        for key in s["params"]:
            node = params
            for part in key.split("."):
                node = node[part]  # KeyError: a params key that the composed config lacks


def test_params_file_is_composed_config(tmp_path):
    from pipeline.params import current_overrides, main

    out = tmp_path / "params.yaml"
    assert main(["experiment=demo", "collect.n_episodes=3", "--output", str(out)]) == 0
    p = yaml.safe_load(out.read_text())
    assert p["overrides"] == "experiment=demo collect.n_episodes=3"
    assert p["experiment"] == "demo" and p["collect"]["n_episodes"] == 3 and p["env"]["name"] == "textworld"
    assert "${" not in out.read_text()  # DVC does not resolve interpolations in params values
    assert current_overrides(out) == ["experiment=demo", "collect.n_episodes=3"]
    assert main(["experiment=demo", "collect.n_episodes=3", "--check", "--output", str(out)]) == 0
    assert main(["--check", "--output", str(out)]) == 1
    assert main(["env.nope=1", "--output", str(out)]) == 2


def test_params_written_to_dev_stdout_go_through_the_stream(tmp_path):
    """A device path is written through, never replaced by a rename (as root that would swap /dev/stdout's link
    for a file)."""
    out = tmp_path / "params.yaml"
    with open(out, "w") as f:
        proc = subprocess.run([PY, "-m", "pipeline.params", "experiment=demo", "--output", "/dev/stdout"], cwd=ROOT,
                              stdout=f, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.path.islink("/dev/stdout")
    assert yaml.safe_load(out.read_text())["experiment"] == "demo"


def test_dvc_exp_run_set_param_changes_what_the_stage_runs(tmp_path):
    """`dvc exp run -S key=value` edits params.yaml; the stage command reads params.yaml, so the value is used
    (the stage prints the config it would run with `--cfg job`)."""
    from pipeline.params import write_params

    repo = _dvc_repo(tmp_path / "repo")
    write_params(["experiment=demo"], repo / "params.yaml")
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"show": {
        "cmd": f"{PY} -m pipeline.run sft --params params.yaml --cfg job > shown.yaml",
        "params": ["overrides", "sft"], "outs": ["shown.yaml"]}}}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for cmd in (["git", "add", "-A"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"]):
        assert _run(cmd, cwd=repo).returncode == 0
    proc = subprocess.run([PY, "-m", "dvc", "exp", "run", "-S", "sft.lr=0.0123", "-S", "sft.max_steps=7"], cwd=repo,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = yaml.safe_load((repo / "shown.yaml").read_text())
    assert shown["sft"]["lr"] == 0.0123 and shown["sft"]["max_steps"] == 7 and shown["experiment"] == "demo"
    # a value the schema refuses is named, with the file
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["sft"]["max_steps"] = 0
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    proc = subprocess.run([PY, "-m", "pipeline.run", "sft", "--params", "params.yaml"], cwd=repo, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "params.yaml" in proc.stderr and "max_steps" in proc.stderr, proc.stderr


def test_dagster_materialisation_then_dvc_is_up_to_date(tmp_path, monkeypatch, session_cache):
    """Dagster materialises trajectories; dvc_sync records it; dvc status is clean, dvc repro a no-op,
    the lock's md5 equals Dagster's data version, and a forced dvc repro reproduces the same hash."""
    from pipeline.definitions import defs
    from pipeline.dvc_sync import dvc, from_dagster, record, to_dagster

    repo = _dvc_repo(tmp_path / "repo")
    for item in ("conf", "talentrl_core"):
        shutil.copytree(ROOT / item, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    monkeypatch.chdir(repo)  # artifacts_dir "artifacts" is relative: outputs land in the temp repo
    overrides = ["experiment=demo", "collect.n_episodes=2", f"env.cache_dir={session_cache}", "tracker.mode=disabled"]
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("talentrl_chain").execute_in_process(
        run_config={"resources": {"talentrl": {"config": {"overrides": overrides}}}},
        instance=instance,
        asset_selection=[dg.AssetKey("trajectories")],
    )
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.passed
    mat = result.asset_materializations_for_node("trajectories")[0]
    version = mat.tags["dagster/data_version"]
    assert version == dir_md5(repo / "artifacts" / "trajectories") and version.endswith(".dir")

    assert from_dagster(instance) == (["collect"], overrides)
    assert record(["collect"], overrides, root=repo) == ["collect"]
    assert "up to date" in dvc("status", "collect", root=repo).stdout
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]["collect"]
    assert lock["outs"][0]["md5"] == version
    assert lock["cmd"] == "python -m pipeline.run collect --params params.yaml"
    assert lock["params"]["params.yaml"]["overrides"] == " ".join(overrides)
    assert "didn't change" in dvc("repro", "collect", root=repo).stdout

    proc = dvc("repro", "-f", "collect", root=repo, check=False)  # DVC runs the same command itself
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dir_md5(repo / "artifacts" / "trajectories") == version, "collect is not deterministic"
    assert to_dagster(instance, root=repo) == ["collect"]
    event = instance.get_latest_materialization_event(dg.AssetKey("trajectories"))
    assert event.asset_materialization.tags["dagster/data_version"] == version
    assert from_dagster(instance) == (["collect"], overrides)  # the DVC-reported event round-trips


# ---------------------------------------------------------------------------------------------- checks


def test_trajectory_check_fails_on_empty_and_foreign_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from assets.checks import trajectories_schema_and_counts
    from pipeline.resources import TalentRLConfigResource

    res = TalentRLConfigResource(overrides=[f"artifacts_dir={tmp_path}"])
    assert not trajectories_schema_and_counts(talentrl=res).passed  # nothing collected
    (tmp_path / "trajectories" / "env=qa").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "trajectories" / "env=qa" / "foreign.parquet")
    result = trajectories_schema_and_counts(talentrl=res)
    assert not result.passed and "foreign.parquet" in result.metadata["error"].value


def test_library_check_fails_on_an_empty_library(tmp_path):
    from assets.checks import library_covers_task_types
    from pipeline.resources import TalentRLConfigResource

    result = library_covers_task_types(talentrl=TalentRLConfigResource(overrides=[f"artifacts_dir={tmp_path}"]))
    assert not result.passed and result.metadata["skills"].value == 0


def test_checkpoint_check_loads_and_finds_non_finite_weights(tmp_path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from assets.checks import sft_checkpoint_finite
    from pipeline.resources import TalentRLConfigResource

    res = TalentRLConfigResource(overrides=[f"artifacts_dir={tmp_path}"])
    assert not sft_checkpoint_finite(talentrl=res).passed  # no checkpoint yet
    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(tmp_path / "models" / "sft")
    assert sft_checkpoint_finite(talentrl=res).passed
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "models" / "sft")
    result = sft_checkpoint_finite(talentrl=res)
    assert not result.passed and "up_proj" in result.metadata["non_finite_tensors"].value[0]


def test_promotion_gate_reads_the_metrics_schema():
    from assets.checks import promotion_gate

    m = {"schema": 1, "systems": {"talentrl": {"tw": {"success": 0.40}, "alf": {"success": 0.9}},
                                  "talent_sft": {"tw": {"success": 0.50}, "alf": {"success": 0.5}}}}
    passed, meta = promotion_gate(m, ["tw", "alf"], 0.05)
    assert not passed and meta["failures"] == ["tw: talentrl 0.400 < talent_sft 0.500 - 0.05"]
    assert promotion_gate(m, ["tw", "alf"], 0.10)[0]
    assert not promotion_gate(m, ["qa_nq"], 0.5)[0]  # a panel without numbers cannot promote


# ---------------------------------------------------------------------------------------------- tracking


def test_tracker_offline_disabled_and_redacted(tmp_path, monkeypatch):
    from pipeline.config import load_config
    from talentrl_core.tracking import NullTracker, redact, start_run

    cfg = load_config([f"artifacts_dir={tmp_path}", "tracker.mode=disabled"])
    t = start_run(cfg, "sft")
    assert isinstance(t, NullTracker) and t.run_id is None and t.metadata() == {}
    t.log({"sft/loss": 1.0}, step=0)
    t.finish()

    plain = redact(cfg)
    assert "openai_api_key_env" not in plain["model"] and "teacher_api_key_env" not in plain["library"]
    assert plain["rl"]["token_agg"] == "token_mean" and plain["model"]["max_new_tokens"] == cfg.model.max_new_tokens

    monkeypatch.delenv("WANDB_DIR", raising=False)
    cfg = load_config([f"artifacts_dir={tmp_path}"])  # offline by default
    with start_run(cfg, "sft") as t:
        t.log({"sft/loss": 1.0}, step=1)
    assert t.run_id and t.metadata()["wandb_mode"] == "offline"
    [logged] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")  # the run's config is in here
    # wandb's service process may still be flushing the file after finish() under load: wait for it (bounded)
    deadline = time.time() + 60
    while b"token_agg" not in logged.read_bytes() and time.time() < deadline:
        time.sleep(0.5)
    assert b"token_agg" in logged.read_bytes() and b"api_key" not in logged.read_bytes()


def test_a_crashed_stage_marks_its_wandb_run_failed(tmp_path, monkeypatch):
    import talentrl_core.evaluation.runner as runner
    from pipeline.config import load_config
    from talentrl_core.stages import evaluate

    def boom(*a, **k):
        raise RuntimeError("environment died")

    monkeypatch.setattr(runner, "evaluate_all", boom)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="environment died"):
        evaluate(load_config([f"artifacts_dir={tmp_path}"]))
    [run_file] = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.time() + 60  # wandb's service may still be writing after finish() under load
    while not any(r.HasField("exit") for r in wandb_records(run_file)) and time.time() < deadline:
        time.sleep(0.5)
    [exit_rec] = [r.exit for r in wandb_records(run_file) if r.HasField("exit")]
    assert exit_rec.exit_code == 1


# ---------------------------------------------------------------------------------------------- webserver


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message stack }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


def test_webserver_launches_a_run_through_graphql(tmp_path, session_cache):
    """dagster-webserver on a free loopback port; launchRun (GraphQL) materialises trajectories."""
    import httpx

    from tests.dagster_web import wait_run, webserver

    t0 = time.time()
    with webserver(tmp_path) as url:
        ready_s = time.time() - t0
        artifacts = tmp_path / "artifacts"
        overrides = [f"artifacts_dir={artifacts}", f"env.cache_dir={session_cache}", "experiment=demo",
                     "collect.n_episodes=1", "tracker.mode=disabled"]
        params = {
            "selector": {"repositoryLocationName": "talentrl", "repositoryName": "__repository__",
                         "jobName": "talentrl_chain", "assetSelection": [{"path": ["trajectories"]}]},
            "runConfigData": {"resources": {"talentrl": {"config": {"overrides": overrides}}}},
        }
        reply = httpx.post(f"{url}/graphql", json={"query": LAUNCH, "variables": {"params": params}}, timeout=60).json()
        launched = reply["data"]["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        assert wait_run(url, launched["run"]["runId"], t0 + 420) == "SUCCESS"
        print(f"webserver ready in {ready_s:.1f}s; run finished {time.time() - t0:.1f}s after start")

    with dg.DagsterInstance.from_config(str(tmp_path / "dagster_home")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("trajectories"))
        assert event.asset_materialization.tags["dagster/data_version"] == dir_md5(artifacts / "trajectories")
