"""DVC on a fresh clone: the committed params.yaml and dvc.lock are current, and dvc.yaml's deps and params are what
each stage's code imports and reads (docs/orchestration.md, "DVC").

* params.yaml is what ``python -m pipeline.params <its overrides>`` composes (``--check``);
* dvc.lock records, for every stage, the hashes of the committed code it depends on and the params.yaml values it
  reads (``python -m pipeline.dvc_sync --lock`` rewrites it), so ``dvc status`` on a fresh clone names only the
  outputs it lacks;
* a stage's deps cover every ``talentrl_core`` module its stage function imports (the import closure, walked with
  ``ast``: the function and the helpers of stages.py it calls, then every import of every module reached);
* a stage's params cover every config group its code reads as ``cfg.<group>``, and an eval-only key change
  (``eval.n_per_panel``) leaves collect, distill, sft and rl up to date in ``dvc status``.

``python tests/test_dvc_fresh.py`` prints each stage's import closure and the config groups it reads.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from talentrl_core.config import TalentRLConfig
from talentrl_core.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
PKG = "talentrl_core"
STAGES_PY = ROOT / PKG / "stages.py"
PY = sys.executable
REFRESH = "python -m pipeline.params experiment=demo && python -m pipeline.dvc_sync --lock"
STAGE_FUNCTIONS = {stage: spec.run.__name__ for stage, spec in STAGES.items()}
"Each stage's function in stages.py (the root of its import closure)."
GROUPS = tuple(f.name for f in dataclasses.fields(TalentRLConfig))
"The top-level keys of the config (groups and scalars): what ``cfg.<key>`` reads."
UNTRACKED = {
    "tracker": "where and whether metrics are logged (wandb), never what a stage writes",
    "artifacts_dir": "where the outputs are: dvc.yaml's outs name the paths",
    "keep_previous_runs": "how many earlier runs are set aside next to an output, never the output itself",
}


# ------------------------------------------------------------------------------------------- import closure


def _module_file(module: str) -> Path | None:
    p = ROOT.joinpath(*module.split("."))
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").exists() else None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(node: ast.AST, path: Path) -> set[Path]:
    """The talentrl_core files an import anywhere under ``node`` (in ``path``) executes, parents' __init__ included."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[Path] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - n.level + 1] + ([n.module] if n.module else []))
            names = [base] + [f"{base}.{a.name}" for a in n.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != PKG:
                continue
            for i in range(1, len(parts) + 1):
                f = _module_file(".".join(parts[:i]))
                if f:
                    found.add(f)
    return found


def _stage_defs(function: str) -> list[ast.AST]:
    """The stage function and the stages.py functions and classes it uses (transitively)."""
    tree = ast.parse(STAGES_PY.read_text())
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    used, todo = {}, [function]
    while todo:
        name = todo.pop()
        if name not in used:
            used[name] = defs[name]
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    return list(used.values())


@lru_cache(maxsize=None)
def stage_closure(stage: str) -> frozenset[Path]:
    """Every talentrl_core file the stage's code can import: stages.py's module-level imports, the imports inside the
    stage function and the helpers it calls, then every import (module-level or inside a function) of each module
    reached. A superset of what one run executes, never less."""
    tree = ast.parse(STAGES_PY.read_text())
    start = set()
    for n in tree.body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            start |= _imports(n, STAGES_PY)
    for d in _stage_defs(STAGE_FUNCTIONS[stage]):
        start |= _imports(d, STAGES_PY)
    seen, todo = {STAGES_PY}, [f for f in start if f != STAGES_PY]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo += [g for g in _imports(ast.parse(f.read_text()), f) if g not in seen]
    return frozenset(seen)


def _is_config(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in ("cfg", "config")) or \
        (isinstance(node, ast.Attribute) and node.attr == "cfg")


@lru_cache(maxsize=None)
def groups_read(stage: str) -> dict[str, set[str]]:
    """Config groups (and top-level keys) the stage's code reads as ``cfg.<group>``: in the stage function and its
    stages.py helpers, and anywhere in the other modules of its closure. {group: {files}}"""
    nodes = [(d, "talentrl_core/stages.py") for d in _stage_defs(STAGE_FUNCTIONS[stage])]
    nodes += [(ast.parse(f.read_text()), str(f.relative_to(ROOT))) for f in stage_closure(stage) if f != STAGES_PY]
    out: dict[str, set[str]] = {}
    for tree, where in nodes:
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr in GROUPS and _is_config(n.value):
                out.setdefault(n.attr, set()).add(where)
    return out


def _spec() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _covered(path: Path, deps: list[str]) -> bool:
    rel = path.relative_to(ROOT)
    return any(rel == Path(d) or Path(d) in rel.parents for d in deps)


@pytest.mark.parametrize("stage", list(STAGE_FUNCTIONS))
def test_deps_cover_the_stage_import_closure(stage):
    deps = _spec()[stage]["deps"]
    missing = sorted(str(f.relative_to(ROOT)) for f in stage_closure(stage)
                     if not _covered(f, deps) and f.stat().st_size > 0)  # an empty __init__.py runs nothing
    assert not missing, f"dvc.yaml stage {stage}: its code imports {missing}, not in its deps"
    assert "conf" not in deps, f"{stage}: conf/ reaches a stage only through params.yaml (its params), not as a dep"
    assert (ROOT / PKG / "routing_warmup.py") in stage_closure("sft")


@pytest.mark.parametrize("stage", list(STAGE_FUNCTIONS))
def test_params_cover_the_groups_the_stage_reads(stage):
    params = _spec()[stage]["params"]
    tracked = {p.split(".")[0] for p in params}
    missing = {g: sorted(w) for g, w in groups_read(stage).items() if g not in tracked and g not in UNTRACKED}
    assert not missing, f"dvc.yaml stage {stage}: its code reads {missing} (group: files), not in its params"
    assert not tracked & set(UNTRACKED), f"{stage} tracks {tracked & set(UNTRACKED)}: {UNTRACKED}"
    assert "overrides" in params  # the lock records how params.yaml was composed


def test_eval_keys_are_read_by_evaluate_only():
    spec = _spec()
    for stage in [s for s in STAGES if s != "evaluate"]:
        assert "eval" not in groups_read(stage), f"{stage} reads cfg.eval: {groups_read(stage)['eval']}"
        assert not [p for p in spec[stage]["params"] if p.split(".")[0] == "eval"], stage
    assert "eval" in spec["evaluate"]["params"]


# ------------------------------------------------------------------------------------------- committed files


def _env_without_overrides() -> dict:
    """The environment `make demo` composes in: no TALENTRL_* path variables (conftest sets TALENTRL_DATA_DIR)."""
    return {k: v for k, v in os.environ.items() if k not in ("TALENTRL_DATA_DIR", "TALENTRL_ARTIFACTS_DIR",
                                                               "TALENTRL_CACHE_DIR")}


def test_committed_params_yaml_is_what_the_demo_composes():
    from pipeline.params import current_overrides

    overrides = current_overrides()
    assert overrides == ["experiment=demo"], f"params.yaml is committed for the demo; it records {overrides}"
    proc = subprocess.run([PY, "-m", "pipeline.params", "--check", *overrides], cwd=ROOT, capture_output=True,
                          text=True, env=_env_without_overrides())
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\nrefresh: {REFRESH}"


def test_committed_dvc_lock_records_the_code_and_params():
    """Every stage in dvc.lock: its command, its deps on code with the md5 DVC gives the files now, its params with
    params.yaml's values, and its outputs without a hash (they come from a run: `make demo` or `dvc repro` record
    them); the artifact deps likewise."""
    from dvc.utils.serialize import load_yaml  # DVC's YAML 1.2 reader: `1e-06` is a float, as DVC wrote it

    from assets.dvc_hash import dvc_md5

    spec, lock = _spec(), load_yaml(ROOT / "dvc.lock")["stages"]
    params = load_yaml(ROOT / "params.yaml")
    assert list(lock) == list(spec), f"dvc.lock stages {list(lock)} != dvc.yaml's; refresh: {REFRESH}"
    stale = []
    for stage, s in spec.items():
        entry = lock[stage]
        if entry["cmd"] != s["cmd"]:
            stale.append(f"{stage}: cmd")
        recorded = {d["path"]: d for d in entry.get("deps", [])}
        if sorted(recorded) != sorted(s["deps"]):
            stale.append(f"{stage}: deps {sorted(set(recorded) ^ set(s['deps']))}")
        for path, d in recorded.items():
            if path.startswith("artifacts/"):
                if "md5" in d:
                    stale.append(f"{stage}: {path} has a hash (a run's; the committed lock has none)")
            elif not (ROOT / path).exists() or d.get("md5") != dvc_md5(ROOT / path):
                stale.append(f"{stage}: {path}")
        values = entry.get("params", {}).get("params.yaml", {})
        for key in s["params"]:
            node = params
            for part in key.split("."):
                node = node[part]
            if values.get(key) != node:
                stale.append(f"{stage}: param {key}")
        if sorted(values) != sorted(s["params"]):
            stale.append(f"{stage}: params {sorted(set(values) ^ set(s['params']))}")
        for out in entry.get("outs", []):
            if "md5" in out:
                stale.append(f"{stage}: out {out['path']} has a hash (a run's; the committed lock has none)")
    assert not stale, f"dvc.lock is not current: {stale}; refresh: {REFRESH}"


def _clone_like(tmp: Path) -> Path:
    """A git + DVC repository holding what a fresh clone of this one holds for DVC (dvc.yaml, dvc.lock,
    params.yaml, .dvc/config, .dvcignore and the code), without artifacts."""
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("dvc.yaml", "dvc.lock", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / PKG, repo / PKG, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    assert subprocess.run(["git", "init", "-q"], cwd=repo).returncode == 0
    return repo


def _status(repo: Path) -> dict:
    proc = subprocess.run([PY, "-m", "dvc", "status", "--json"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return yaml.safe_load(proc.stdout) or {}


def _changed(status: dict) -> dict[str, list]:
    """Per stage, what `dvc status` reports besides missing artifacts (code, params, command)."""
    out = {}
    for stage, entries in status.items():
        rest = []
        for e in entries:
            if isinstance(e, dict):
                for kind in ("changed deps", "changed outs"):
                    rest += [(kind, p, why) for p, why in e.get(kind, {}).items()
                             if not (p.startswith("artifacts/") and why in ("deleted", "not in cache"))]
                rest += [k for k in e if k not in ("changed deps", "changed outs")]
            else:
                rest.append(e)
        if rest:
            out[stage.split(":")[-1]] = rest
    return out


def test_dvc_status_on_a_fresh_clone_names_only_missing_outputs(tmp_path):
    """`dvc status` of a fresh clone: every stage lacks its outputs, nothing else (no code, params or command
    changed). Then an eval-only key changes: only evaluate's params changed."""
    repo = _clone_like(tmp_path)
    status = _status(repo)
    assert set(status) == set(_spec()), status
    assert _changed(status) == {}, f"{_changed(status)}; refresh: {REFRESH}"
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["eval"]["n_per_panel"] += 1
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = _changed(_status(repo))
    assert list(changed) == ["evaluate"], changed
    assert "params.yaml" in str(changed["evaluate"]) and "eval" in str(changed["evaluate"]), changed


if __name__ == "__main__":
    for st in STAGE_FUNCTIONS:
        print(f"{st}:\n  imports: " + " ".join(sorted(str(f.relative_to(ROOT)) for f in stage_closure(st))))
        print("  reads: " + ", ".join(f"{g} ({', '.join(sorted(w))})" for g, w in sorted(groups_read(st).items())))
