"""Asset checks: the quality gates between stages (all blocking: a failed gate stops the chain).

* ``trajectories``: every file carries the TalentRL schema tag and columns; > 0 episodes.
* ``library``: the configured library version has skills and talents for ``cfg.env``; every task type
  with a successful episode there is covered by at least one skill (``SkillRecord.task_types``).
* ``sft_checkpoint`` / ``rl_checkpoint`` / ``flat_grpo_checkpoint``: loads with ``AutoModelForCausalLM``;
  every weight finite.
* ``evaluation``: promotion gate — on every panel, talentrl's success is not below talent_sft's by
  more than ``cfg.eval.promote_tolerance`` (metrics.json, ``talentrl_core.evaluation.metrics`` schema).

A check returns ``passed=False`` with the reason for a failed gate; unexpected errors propagate.
"""


import json
import math

import dagster as dg

from talentrl_core.paths import ArtifactPaths
from talentrl_core.systems import PROMOTION_PAIR
from talentrl_core.trajectories import TrajectoryFileError, read_table, trajectory_files

from .resources import TalentRLConfigSource
from .stage_assets import evaluation, library, sft_checkpoint, trajectories


@dg.asset_check(asset=trajectories, blocking=True, description="Schema tag and columns valid; > 0 episodes.")
def trajectories_schema_and_counts(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    root = ArtifactPaths.of(talentrl.load()).trajectories
    files = trajectory_files(root)
    try:
        table = read_table(root)
    except TrajectoryFileError as e:
        return dg.AssetCheckResult(passed=False, metadata={"error": str(e), "files": len(files)})
    rows = table.select(["task_type", "success", "error"]).to_pylist()
    by_type: dict[str, int] = {}
    for r in rows:
        by_type[r["task_type"]] = by_type.get(r["task_type"], 0) + 1
    return dg.AssetCheckResult(
        passed=len(rows) > 0,
        metadata={
            "files": len(files),
            "episodes": len(rows),
            "successes": sum(bool(r["success"]) for r in rows),
            "env_errors": sum(1 for r in rows if r["error"]),
            "episodes_by_task_type": by_type,
        },
    )


def _successful_task_types(root, env: str) -> set[str]:
    rows = read_table(root, env).select(["task_type", "success"]).to_pylist()
    return {r["task_type"] for r in rows if r["success"]}


@dg.asset_check(asset=library, blocking=True, description="Skills and talents non-empty; every solved task type covered.")
def library_covers_task_types(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    from talentrl_core.library.store import Library

    cfg = talentrl.load()
    env = getattr(cfg.env.name, "value", cfg.env.name)
    lib = Library.open(cfg=cfg.library)  # the configured version (latest by default); no embedder loaded
    skills, talents = lib.skills(env=env), lib.talents(env=env)
    covered = {t for s in skills for t in s.task_types}
    needed = _successful_task_types(ArtifactPaths.of(cfg).trajectories, env)
    uncovered = sorted(needed - covered)
    return dg.AssetCheckResult(
        passed=bool(skills) and bool(talents) and not uncovered,
        metadata={"library_version": lib.version, "env": env, "skills": len(skills), "talents": len(talents),
                  "task_types": sorted(needed), "uncovered": uncovered},
    )


def _finite_checkpoint(path) -> dg.AssetCheckResult:
    """Load a checkpoint folder with transformers and check that every parameter is finite."""
    import torch
    from transformers import AutoModelForCausalLM

    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        listing = sorted(p.name for p in path.iterdir()) if path.exists() else []
        return dg.AssetCheckResult(passed=False, metadata={"error": f"no config.json in {path}", "contents": listing[:20]})
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype="auto")
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    n_params = sum(p.numel() for p in model.parameters())
    return dg.AssetCheckResult(
        passed=not bad,
        metadata={"parameters": n_params, "non_finite_tensors": bad[:20], "model_type": model.config.model_type},
    )


@dg.asset_check(asset=sft_checkpoint, blocking=True, description="Loads with AutoModelForCausalLM; all weights finite.")
def sft_checkpoint_finite(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    return _finite_checkpoint(ArtifactPaths.of(talentrl.load()).sft_checkpoint)


@dg.asset_check(asset="rl_checkpoint", blocking=True, description="Loads with AutoModelForCausalLM; all weights finite.")
def rl_checkpoint_finite(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    return _finite_checkpoint(ArtifactPaths.of(talentrl.load()).rl_checkpoint)


@dg.asset_check(asset="flat_grpo_checkpoint", blocking=True, description="Loads with AutoModelForCausalLM; all weights finite.")
def flat_grpo_checkpoint_finite(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    return _finite_checkpoint(ArtifactPaths.of(talentrl.load()).flat_grpo_checkpoint)


def _metrics_check(talentrl: TalentRLConfigSource, gate) -> dg.AssetCheckResult:
    """Run ``gate(metrics, cfg) -> (passed, metadata)`` on the evaluation's metrics.json."""
    cfg = talentrl.load()
    metrics = json.loads((ArtifactPaths.of(cfg).eval / "metrics.json").read_text())
    passed, meta = gate(metrics, cfg)
    return dg.AssetCheckResult(passed=passed, metadata=meta)


def promotion_gate(metrics: dict, panels: list[str], tolerance: float) -> tuple[bool, dict]:
    """Pass when talentrl >= talent_sft - tolerance on every panel; a missing number fails.

    >>> m = {"systems": {"talentrl": {"tw": {"success": 0.50}}, "talent_sft": {"tw": {"success": 0.52}}}}
    >>> promotion_gate(m, ["tw"], 0.05)[0], promotion_gate(m, ["tw"], 0.01)[0]
    (True, False)
    """
    systems = metrics.get("systems", {})
    a, b = PROMOTION_PAIR  # talentrl, talent_sft
    gaps, failures = {}, []
    for panel in panels:
        rl = systems.get(a, {}).get(panel, {}).get("success")
        sft = systems.get(b, {}).get(panel, {}).get("success")
        if rl is None or sft is None or not (math.isfinite(rl) and math.isfinite(sft)):
            failures.append(f"{panel}: no success for {a} ({rl}) or {b} ({sft})")
            continue
        gaps[panel] = {a: rl, b: sft, "gap": round(rl - sft, 6)}
        if rl < sft - tolerance:
            failures.append(f"{panel}: {a} {rl:.3f} < {b} {sft:.3f} - {tolerance}")
    return not failures, {"panels": gaps, "failures": failures, "tolerance": tolerance}


@dg.asset_check(asset=evaluation, blocking=True, description="Promotion gate: talentrl within tolerance of talent_sft.")
def talentrl_not_below_sft(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    return _metrics_check(talentrl, lambda m, cfg: promotion_gate(m, list(cfg.eval.panels), cfg.eval.promote_tolerance))


def error_gate(metrics: dict, max_share: float) -> tuple[bool, dict]:
    """Pass when no (system, panel) has more than ``max_share`` of its greedy episodes ending in an env error.

    >>> m = {"systems": {"talentrl": {"tw": {"n": 100, "errors": 6}}, "talent_sft": {"tw": {"n": 100, "errors": 0}}}}
    >>> error_gate(m, 0.05)[0], error_gate(m, 0.10)[0]
    (False, True)
    """
    shares, failures = {}, []
    for system, panels in sorted(metrics.get("systems", {}).items()):
        for panel, b in sorted(panels.items()):
            share = b.get("errors", 0) / max(b.get("n", 0), 1)
            shares[f"{system}/{panel}"] = round(share, 6)
            if share > max_share:
                failures.append(f"{system} on {panel}: {b.get('errors', 0)} of {b.get('n', 0)} episodes ended in an environment error")
    return not failures, {"error_share": shares, "failures": failures, "max_error_share": max_share}


@dg.asset_check(asset=evaluation, blocking=True, description="Integrity: environment errors within eval.max_error_share.")
def evaluation_env_errors(talentrl: TalentRLConfigSource) -> dg.AssetCheckResult:
    return _metrics_check(talentrl, lambda m, cfg: error_gate(m, cfg.eval.max_error_share))


STAGE_CHECKS = [
    trajectories_schema_and_counts,
    library_covers_task_types,
    sft_checkpoint_finite,
    rl_checkpoint_finite,
    flat_grpo_checkpoint_finite,
    talentrl_not_below_sft,
    evaluation_env_errors,
]
