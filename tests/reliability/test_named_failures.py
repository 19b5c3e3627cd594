"""Every command line ends a failure in one named line, never a traceback (issue 41, round two): the stages of
``pipeline.run`` (Hydra's own setup included), ``pipeline.seeds``, ``pipeline.talent_matrix``, ``pipeline.data``,
``pipeline.params`` and the bench scripts. ``TALENTRL_TRACEBACK=1`` brings the traceback back. Also: a refused
params file says it keeps the bad value (DVC experiments), a multirun job's derived paths follow its folder, and
values that ran nothing (a negative seed, a missing --from, an out-of-range WebShop test count) are refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

import talentrl_core.stages as stages_mod
from pipeline.errors import describe, named_errors
from pipeline.run import main as run_main

ROOT = Path(__file__).resolve().parents[2]


def _cli(args: list[str], cwd: Path, trace: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TALENTRL_TRACEBACK"}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **({"TALENTRL_TRACEBACK": "1"} if trace else {}))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _assert_named(err: str, prog: str, *words: str) -> str:
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{prog}: error: ") and "(set TALENTRL_TRACEBACK=1 for the traceback)" in last, err
    assert all(w in last for w in words), (words, last)
    return last


def _cases(tmp: Path) -> dict[str, tuple[list[str], str, list[str]]]:
    (tmp / "a_file").write_text("not a folder")
    (tmp / "gone").symlink_to(tmp / "nowhere")
    return {
        "run: artifacts_dir is a file": (["-m", "pipeline.run", "collect", f"artifacts_dir={tmp / 'a_file'}"],
                                         "collect", [f"{tmp / 'a_file'} is a file, not a folder", "hydra.run.dir"]),
        "run -m: artifacts_dir is a broken link": (
            ["-m", "pipeline.run", "sft", "-m", "sft.lr=1e-3,2e-3", f"artifacts_dir={tmp / 'gone'}"],
            "sft", [f"{tmp / 'gone'} is a broken link", "hydra.sweep.dir"]),
        "seeds: missing --from": (["-m", "pipeline.seeds", "--from", str(tmp / "missing"), "--seeds", "1", "--out",
                                   str(tmp / "out")], "pipeline.seeds", [f"--from {tmp / 'missing'}: does not exist"]),
        "seeds: negative seed": (["-m", "pipeline.seeds", "--from", str(tmp), "--seeds", "1", "-3", "--out",
                                  str(tmp / "out")], "pipeline.seeds", ["--seeds -3: a seed is 0"]),
        "talent_matrix: no data": (["-m", "pipeline.talent_matrix", "--checkpoint", "x", "--out", str(tmp / "tm"),
                                    "env=webshop", f"data_dir={tmp / 'nodata'}"],
                                   "pipeline.talent_matrix", [str(tmp / "nodata")]),
        "data: no mirror": (["-m", "pipeline.data", "--write-manifest", str(tmp / "nomirror")], "pipeline.data",
                            ["FileNotFoundError", str(tmp / "nomirror" / "MANIFEST.md")]),
        "params: output under a file": (["-m", "pipeline.params", "--output", str(tmp / "a_file" / "params.yaml")],
                                        "pipeline.params", [str(tmp / "a_file")]),
        "bench: no data": ([str(ROOT / "bench" / "bench_webshop.py"), "--data-dir", str(tmp / "nodata"),
                            "--episodes", "1", "--queries", "1", "--scales", "1000"],
                           "bench_webshop", [str(tmp / "nodata")]),
    }


CASE_NAMES = [
    "run: artifacts_dir is a file", "run -m: artifacts_dir is a broken link", "seeds: missing --from",
    "seeds: negative seed", "talent_matrix: no data", "data: no mirror", "params: output under a file",
    "bench: no data"]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_every_cli_ends_in_one_named_line(case, tmp_path):
    args, prog, words = _cases(tmp_path)[case]
    proc = _cli(args, tmp_path)
    assert proc.returncode == 1, proc.stderr
    _assert_named(proc.stderr, prog, *words)
    assert not (tmp_path / "missing").exists() and not (tmp_path / "out").exists()  # refused before making anything


@pytest.mark.parametrize("case", ["run: artifacts_dir is a file", "seeds: missing --from", "bench: no data"])
def test_traceback_env_brings_the_traceback_back(case, tmp_path):
    args, _, _ = _cases(tmp_path)[case]
    proc = _cli(args, tmp_path, trace=True)
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr, proc.stderr


def _http_error() -> httpx.HTTPStatusError:
    req = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")
    return httpx.HTTPStatusError("Server error '503 Service Unavailable'", request=req,
                                 response=httpx.Response(503, request=req))


@pytest.mark.parametrize("exc,words", [
    (_http_error(), ["distill: error: HTTPStatusError: Server error '503"]),
    (json.JSONDecodeError("Expecting value", "<html>", 0), ["JSONDecodeError: Expecting value"]),
    (KeyError("talent_id"), ["KeyError: 'talent_id'"]),
])
def test_an_uncaught_error_type_of_a_stage_is_one_named_line(exc, words, tmp_path, monkeypatch, capsys):
    """HTTP and parsing errors of external services were not among the types ``run_stage`` caught."""

    def boom(cfg):
        raise exc

    monkeypatch.delenv("TALENTRL_TRACEBACK", raising=False)
    monkeypatch.setitem(stages_mod.STAGES, "distill", boom)
    assert run_main(["distill", f"artifacts_dir={tmp_path}"]) == 1
    _assert_named(capsys.readouterr().err, "distill", *words)
    monkeypatch.setenv("TALENTRL_TRACEBACK", "1")
    with pytest.raises(type(exc)):
        run_main(["distill", f"artifacts_dir={tmp_path}"])
    assert os.environ.get("HYDRA_FULL_ERROR") is None  # set only while Hydra runs


def test_a_paused_stage_says_so_in_one_line_and_exits_75(tmp_path, monkeypatch, capsys):
    """A stage stopped at its time budget is not a failure: one line without ``error``, exit 75 (EX_TEMPFAIL), also
    with tracebacks asked for."""
    from talentrl_core.checkpoints import Paused

    def pause(cfg):
        raise Paused("sft paused at step 3 of 9 after sft.max_minutes=1; run the same command to resume")

    monkeypatch.setitem(stages_mod.STAGES, "sft", pause)
    monkeypatch.setenv("TALENTRL_TRACEBACK", "1")
    assert run_main(["sft", f"artifacts_dir={tmp_path}"]) == 75
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "sft: sft paused at step 3 of 9 after sft.max_minutes=1; run the same command to resume"


def test_a_read_only_artifacts_dir_fails_before_hydra(tmp_path, monkeypatch, capsys):
    real_mkdir = Path.mkdir

    def refuse(self, *a, **k):  # what a read-only folder answers (chmod does not stop root)
        if str(self).startswith(str(tmp_path / "ro")):
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *a, **k)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(Path, "mkdir", refuse)
    monkeypatch.delenv("TALENTRL_TRACEBACK", raising=False)
    assert run_main(["collect", f"artifacts_dir={tmp_path / 'ro'}"]) == 1
    err = capsys.readouterr().err
    _assert_named(err, "collect", f"{tmp_path / 'ro' / 'hydra'}", "Permission denied", "hydra.run.dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_chmod_read_only_artifacts_dir(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert run_main(["collect", f"artifacts_dir={ro}"]) == 1
    _assert_named(capsys.readouterr().err, "collect", str(ro))


def test_the_helper_as_decorator_and_context_manager(monkeypatch, capsys):
    monkeypatch.delenv("TALENTRL_TRACEBACK", raising=False)
    assert named_errors("x")(lambda: int("nope"))() == 1
    assert capsys.readouterr().err.startswith("x: error: invalid literal for int()")
    with pytest.raises(SystemExit) as ex, named_errors("y"):
        raise ConnectionRefusedError(111, "Connection refused")
    assert ex.value.code == 1 and "y: error: ConnectionRefusedError: [Errno 111]" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt), named_errors("z"):
        raise KeyboardInterrupt
    assert describe(httpx.ConnectError("All connection attempts failed")) == \
        "ConnectError: All connection attempts failed"


def test_a_refused_params_file_says_it_keeps_the_value(tmp_path, capsys):
    """``dvc exp run -S sft.lr=0`` writes the value into params.yaml, where it stays after the refusal."""
    from pipeline.params import write_params

    path = write_params(["experiment=demo"], tmp_path / "params.yaml")
    data = yaml.safe_load(path.read_text())
    data["sft"]["lr"] = 0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert run_main(["sft", "--params", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"config error: {path}: sft.lr=0.0: must be > 0"), err
    assert f"{path} keeps this value after the refusal (`dvc exp run -S` writes it into the workspace)" in err
    assert f"`git checkout -- {path}`" in err
    assert f"`python -m pipeline.params --output {path} experiment=demo`" in err


def test_dvc_exp_run_with_a_bad_value_says_how_to_restore_params(tmp_path):
    """The real ``dvc exp run -S sft.lr=0``: refused, the value stays in params.yaml, the message says how to restore
    it, and after ``git checkout -- params.yaml`` the next experiment runs."""
    import shutil

    from pipeline.params import write_params

    repo, py = tmp_path / "repo", sys.executable
    repo.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{Path(py).parent}{os.pathsep}{os.environ['PATH']}")

    def sh(*cmd):
        return subprocess.run(list(cmd), cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    assert sh("git", "init", "-q").returncode == 0 and sh(py, "-m", "dvc", "init", "-q").returncode == 0
    shutil.copy(ROOT / ".dvcignore", repo / ".dvcignore")
    write_params(["experiment=demo"], repo / "params.yaml")
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"sft": {
        "cmd": f"{py} -m pipeline.run sft --params params.yaml --cfg job > shown.yaml",
        "params": ["overrides", "sft"], "outs": ["shown.yaml"]}}}))
    assert sh("git", "add", "-A").returncode == 0
    assert sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init").returncode == 0
    proc = sh(py, "-m", "dvc", "exp", "run", "-S", "sft.lr=0")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config error: params.yaml: sft.lr=0.0: must be > 0" in out, out
    assert "params.yaml keeps this value after the refusal" in out and "`git checkout -- params.yaml`" in out, out
    assert yaml.safe_load((repo / "params.yaml").read_text())["sft"]["lr"] == 0  # the value did stay
    assert sh("git", "checkout", "--", "params.yaml").returncode == 0
    proc = sh(py, "-m", "dvc", "exp", "run", "-S", "sft.max_steps=7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load((repo / "shown.yaml").read_text())["sft"]["max_steps"] == 7

def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_a_multirun_job_derives_every_path_from_its_own_folder(tmp_path, monkeypatch):
    """Issue 42: library.uri (and env.cache_dir) were resolved before artifacts_dir was replaced for the job."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pipeline.config import CONF_DIR, to_plain
    from pipeline.sweep import job_config

    monkeypatch.delenv("TALENTRL_CACHE_DIR", raising=False)
    main_dir, job_dir = tmp_path / "art", tmp_path / "art" / "multirun" / "t" / "0"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR)):
        cfg = compose(config_name="config", overrides=["experiment=demo", f"artifacts_dir={main_dir}"])
    GlobalHydra.instance().clear()
    base, job = job_config(cfg, job_dir)
    flat_main, flat_job = _flat(to_plain(job_config(cfg)[1])), _flat(to_plain(job))
    under = [k for k, v in flat_main.items() if isinstance(v, str) and v.startswith(str(main_dir))]
    assert base == main_dir and {"artifacts_dir", "library.uri", "env.cache_dir"} <= set(under)
    assert all(flat_job[k].startswith(str(job_dir)) for k in under), {k: flat_job[k] for k in under}


def test_a_distill_sweep_leaves_the_main_library_alone(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_distill(cfg):  # writes where the real stage writes: library.uri
        seen.append(cfg)
        Path(cfg.library.uri).mkdir(parents=True, exist_ok=True)
        (Path(cfg.library.uri) / f"lam-{cfg.library.lam}").write_text("a version")
        return {"uri": cfg.library.uri}

    art = tmp_path / "art"
    (art / "trajectories").mkdir(parents=True)
    monkeypatch.delenv("TALENTRL_CACHE_DIR", raising=False)
    monkeypatch.setitem(stages_mod.STAGES, "distill", fake_distill)
    assert run_main(["distill", "-m", "library.lam=0.3,0.5", f"artifacts_dir={art}"]) == 0
    assert not (art / "library").exists()  # the main library is untouched
    for c in seen:
        job = Path(c.artifacts_dir)
        assert job.parent.parent == art / "multirun" and Path(c.library.uri) == job / "library" / "lancedb"
        assert Path(c.env.cache_dir) == job / "cache"
        assert (job / "library" / "lancedb" / f"lam-{c.library.lam}").exists()
        assert (job / "trajectories").is_symlink()  # the inputs are linked from the main folder


def test_an_out_of_range_webshop_test_count_is_refused(shared_data, tmp_path):
    from talentrl_core.config import EnvConfig, EnvName
    from talentrl_core.envs import make_family

    cfg = EnvConfig(name=EnvName.webshop, webshop_n_test=7000,
                    webshop_products=str(shared_data / "webshop" / "minimal_documents_1000.jsonl"),
                    webshop_instructions=str(shared_data / "webshop" / "items_ins_v2_1000.json"))
    with pytest.raises(ValueError, match=r"env.webshop_n_test=7000 \+ env.webshop_n_dev=0: must be in \[1, 6909\]"):
        make_family(cfg, tmp_path).tasks("train")

