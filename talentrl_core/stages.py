"""The five pipeline stages as plain functions of a ``TalentRLConfig``.

``python -m pipeline.run <stage>``, the Dagster assets and ``dvc repro`` all call these, so every entry
point runs the same code on the same paths. Each returns a JSON-able dict of metadata (paths, counts,
versions, metrics) for the caller to log or attach to the asset.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from .config import PolicyKind, TalentRLConfig
from .envs import make_family
from .systems import RL_ASSET_OF_SYSTEM, RL_SYSTEMS, SYSTEMS

if TYPE_CHECKING:  # the rollout loop imports torch: imported where a stage runs, so that the registry is cheap
    from .rollout import RolloutSettings
    from .trajectories import Trajectory
from .paths import ArtifactPaths
from .prompts import prompt_settings
from .stage_logs import log_collection, log_evaluation, log_library, log_model, log_report


def _uid(*parts) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:16]


def rollout_settings(cfg: TalentRLConfig, run_id: str, split: str, checkpoint: str = "") -> RolloutSettings:
    from .rollout import RolloutSettings

    return RolloutSettings.of(cfg.env, run_id=run_id, split=split, checkpoint=checkpoint)


def collect_settings(cfg: TalentRLConfig, run_id: str) -> RolloutSettings:
    """``rollout_settings`` of a collection run: ``collect.max_steps`` in place of the env's budget where it is set."""
    settings = rollout_settings(cfg, run_id, cfg.collect.split)
    if cfg.collect.max_steps:
        settings.max_steps = cfg.collect.max_steps
    return settings


def family_for(cfg: TalentRLConfig):
    return make_family(cfg.env, Path(cfg.env.cache_dir))


def tasks_for(cfg: TalentRLConfig, family, split: str, n: int, seed: int):
    tasks = family.tasks(split, n, seed)
    family.prepare(tasks, workers=max(1, cfg.collect.workers))  # EnvFamily.prepare: TextWorld builds missing games
    return tasks


def summarise(trajs: list[Trajectory]) -> dict:
    n = len(trajs)
    by_type: dict[str, list[int]] = {}
    for t in trajs:
        by_type.setdefault(t.task_type, []).append(int(t.success))
    return {
        "episodes": n,
        "success_rate": sum(t.success for t in trajs) / max(n, 1),
        "errors": sum(1 for t in trajs if t.error),
        "invalid_actions": sum(t.n_invalid for t in trajs),
        "mean_steps": sum(t.n_steps for t in trajs) / max(n, 1),
        "success_by_type": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_type.items())},
    }


def _spread(items: list, n: int, seed: int) -> list:
    """n items drawn round-robin over a seeded shuffle (every task type gets its share)."""
    import random

    order = list(items)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(n)] if order else []


def collect_strategies(cfg: TalentRLConfig) -> list[Optional[str]]:
    """The strategy experts ``collect`` runs (None: the env's strategy-blind expert)."""
    from .envs.strategies import chosen

    try:
        return chosen(str(cfg.env.name), list(cfg.collect.strategies))
    except KeyError as e:
        raise ValueError(f"collect.strategies: {e.args[0]} (or 'all' / 'none')") from None


class CollectFailed(RuntimeError):
    """Every episode of a collection errored: nothing was written (earlier trajectories stay in place)."""


def write_collected(trajs: list[Trajectory], root: Path, run_id: str) -> list[str]:
    """Write one collection run's trajectories with deterministic ids (reruns write identical content). A run whose
    episodes all errored (a broken env, ``env.step_timeout_s`` too small) raises ``CollectFailed`` instead, so it
    never replaces good trajectories of an earlier run."""
    errors = [t.error for t in trajs if t.error]
    if trajs and len(errors) == len(trajs):
        raise CollectFailed(f"{run_id}: all {len(trajs)} episodes failed (first error: {errors[0]}); nothing written, "
                            f"earlier trajectories under {root} left in place")
    from .trajectories import write_trajectories

    for i, t in enumerate(trajs):
        t.traj_uid = _uid(run_id, t.task_id, i)
    return [str(f) for f in write_trajectories(trajs, root, run_id)]


def _expert_runs(cfg: TalentRLConfig, family, tasks, paths: ArtifactPaths) -> tuple[list[Trajectory], dict]:
    """Every task once per strategy expert; one Parquet file per strategy, played in resumable parts
    (``collect_parts``: a killed collection continues where it stopped)."""
    from .collect_parts import finish_parts, run_in_parts
    from .policies import ExpertPolicy
    from .rollout import EpisodeSpec, run_episodes_parallel

    c = cfg.collect
    trajs: list[Trajectory] = []
    files, per_strategy = [], {}
    for strategy in collect_strategies(cfg):
        run_id = f"collect-{family.name}-{c.split}-expert" + (f"-{strategy}" if strategy else "")
        specs = [EpisodeSpec(task=t, group_uid=_uid(run_id, t.task_id), seed=c.seed + i) for i, t in enumerate(tasks)]
        settings = collect_settings(cfg, run_id)
        part = run_in_parts(specs, lambda chunk, s=strategy: run_episodes_parallel(
            family.make, chunk, lambda i: ExpertPolicy(s), settings, c.workers, c.batch_size), paths.trajectories, run_id)
        files += write_collected(part, paths.trajectories, run_id)
        finish_parts(paths.trajectories, run_id)
        per_strategy[strategy or "expert"] = summarise(part)
        trajs += part
    return trajs, {"files": files, "strategies": per_strategy}


CACHE_STAGING_GRACE_S = 600.0
"A game cache is shared between runs (``TALENTRL_CACHE_DIR``): staging copies younger than this may be live."


def tidy_staging(trajectories: Path, cache_dir: str | Path) -> None:
    """Remove what killed writes left: every staging copy under this run's trajectories, and those of the game cache
    older than ``CACHE_STAGING_GRACE_S``; one line says how many and where."""
    from .io import remove_stale_staging
    from .workdir import say

    for root, grace in ((Path(trajectories), 0.0), (Path(cache_dir), CACHE_STAGING_GRACE_S)):
        gone = remove_stale_staging(root, grace)
        if gone:
            say(f"collect: removed {len(gone)} staging file(s) of interrupted writes under {root} (e.g. {gone[0].name})")


def collect(cfg: TalentRLConfig) -> dict:
    """Roll out ``collect.policy`` on ``collect.split``; write Parquet under artifacts/trajectories/env=<env>/.

    ``policy=expert`` runs every strategy expert of ``collect.strategies`` on every task (one file each). Tracked:
    episodes, success and env errors overall and per strategy (``log_collection``).
    """
    with _tracker(cfg, "collect") as tracker:
        meta = _collect(cfg)
        log_collection(tracker, cfg, meta, cfg.collect.split)
        meta.update(tracker.metadata())
    return meta


def _collect(cfg: TalentRLConfig) -> dict:
    from .policies import RandomPolicy
    from .rollout import EpisodeSpec, run_episodes, run_episodes_parallel

    paths = ArtifactPaths.of(cfg)
    tidy_staging(paths.trajectories, cfg.env.cache_dir)
    family = family_for(cfg)
    c = cfg.collect
    tasks = tasks_for(cfg, family, c.split, c.n_episodes, c.seed)
    run_id = f"collect-{family.name}-{c.split}-{c.policy.value}"
    specs = [EpisodeSpec(task=t, group_uid=_uid(run_id, t.task_id), seed=c.seed + i) for i, t in enumerate(tasks)]
    settings = collect_settings(cfg, run_id)
    t0 = time.time()
    extra: dict = {}
    if c.policy == PolicyKind.llm:
        from .agent import load_policy

        policy, ckpt = load_policy(cfg, c.checkpoint or str(paths.sft_checkpoint))
        settings.checkpoint = ckpt
        trajs = run_episodes(family.make, specs, policy, settings, None, c.batch_size)
    elif c.policy == PolicyKind.expert:
        trajs, extra = _expert_runs(cfg, family, tasks, paths)
    else:
        trajs = run_episodes_parallel(family.make, specs, lambda i: RandomPolicy(c.seed + i), settings, c.workers, c.batch_size)
    if not extra:
        extra = {"files": write_collected(trajs, paths.trajectories, run_id)}
    meta = {"run_id": run_id, **extra, "seconds": round(time.time() - t0, 1), **summarise(trajs)}
    if c.random_episodes > 0:  # failures to mine mistakes from (DESIGN.md §3)
        rid = f"collect-{family.name}-{c.split}-random"
        rspecs = [EpisodeSpec(task=sp.task, group_uid=_uid(rid, sp.task.task_id), seed=c.seed + 7 + i)
                  for i, sp in enumerate(_spread(specs, c.random_episodes, c.seed))]
        rtrajs = run_episodes_parallel(family.make, rspecs, lambda i: RandomPolicy(c.seed + 1000 + i),
                                       collect_settings(cfg, rid), c.workers, c.batch_size)
        meta["random"] = {"files": write_collected(rtrajs, paths.trajectories, rid), **summarise(rtrajs)}
    return meta


def train_trajectories(cfg: TalentRLConfig, expert_first: bool = False) -> list[Trajectory]:
    """The training-split trajectories of ``cfg.env``; ``expert_first``: the expert's alone where there are any."""
    from .trajectories import read_trajectories

    trajs = [t for t in read_trajectories(ArtifactPaths.of(cfg).trajectories, env=cfg.env.name) if t.split == "train"]
    if not trajs:
        raise FileNotFoundError(
            f"no training trajectories for env={cfg.env.name} under {ArtifactPaths.of(cfg).trajectories}: run the collect stage first"
        )
    return ([t for t in trajs if t.policy == "expert"] or trajs) if expert_first else trajs


def distill(cfg: TalentRLConfig) -> dict:
    """Distil skills, mistakes and talents from training trajectories into a new LanceDB library version."""
    from .library import distill_library

    trajs = train_trajectories(cfg)
    with _tracker(cfg, "distill") as tracker:
        t0 = time.time()
        meta = distill_library(trajs, cfg.library, cfg.env.name)
        meta = {"uri": cfg.library.uri, "trajectories": len(trajs), "seconds": round(time.time() - t0, 1), **meta}
        log_library(tracker, cfg, meta)
        meta.update(tracker.metadata())
    return meta


def _tracker(cfg: TalentRLConfig, stage: str):
    """The stage's tracker (a context manager: a stage that raises marks its run failed). Only the main process of a
    multi-process launch (``RANK`` 0) tracks."""
    from .tracking import NullTracker, start_run

    return start_run(cfg, stage) if int(os.environ.get("RANK", "0")) == 0 else NullTracker()


def sft(cfg: TalentRLConfig) -> dict:
    """Talent-aware SFT of the base model on successful training trajectories (TRL SFTTrainer)."""
    from .knowledge import open_knowledge
    from .memory import keep_freed_memory
    from .models import ensure_base_model
    from .sft import train_sft

    keep_freed_memory()  # opt-in (TALENTRL_KEEP_FREED_MEMORY=1): micro-batches reuse freed blocks (memory.py)
    paths = ArtifactPaths.of(cfg)
    trajs = train_trajectories(cfg, expert_first=True)
    knowledge = require_library(open_knowledge(cfg.library), cfg)
    corpus = sorted({t.goal for t in trajs} | {s.observation for t in trajs for s in t.steps})
    base = ensure_base_model(cfg.model, paths.base_model, cfg.data_dir, extra_texts=corpus)
    data = sft_data(cfg, knowledge, trajs)
    meta = {"library_version": knowledge.version, "library_uri": cfg.library.uri, "env": cfg.env.name,
            "prompt": prompt_settings(cfg.env)}
    with _tracker(cfg, "sft") as tracker:
        if cfg.sft.dagger_rounds:
            from .dagger import train_rounds

            info = train_rounds(cfg, family_for(cfg), knowledge, data, base, paths.sft_checkpoint, meta,
                                cfg.keep_previous_runs, tracker)
        else:
            info = train_sft(data, base, paths.sft_checkpoint, cfg.sft, cfg.model, meta=meta,
                             keep_previous=cfg.keep_previous_runs, tracker=tracker)
        tracker.summary({"sft/train_loss": info["train_loss"], "sft/steps": info["steps"],
                         "sft/skill_context_share": data.report["skill_context_share"]})
        log_model(tracker, cfg, "sft", paths.sft_checkpoint, {"library_version": knowledge.version, **info})
        info.update(tracker.metadata())
    return {"checkpoint": str(paths.sft_checkpoint), **info}


def sft_data(cfg: TalentRLConfig, knowledge, trajs: Optional[list[Trajectory]] = None):
    """The SFT stage's samples of ``trajs`` (default: the training trajectories, the expert's where there are any)."""
    from .prompts import routing_cue
    from .sft import build_sft_data

    trajs = trajs or train_trajectories(cfg, expert_first=True)
    return build_sft_data(trajs, knowledge, cfg.sft, cfg.env.history, cfg.env.obs_chars, memory=cfg.env.memory_mode,
                          routing_obs_chars=cfg.env.routing_obs_chars, cue=routing_cue(cfg.env.routing_cue, cfg.env.routing_cue_values))


def require_library(knowledge, cfg: TalentRLConfig):
    """``knowledge`` when its library holds a version; else FileNotFoundError naming the library and the stage that
    builds it (instead of an SFT data check failing on empty retrievals)."""
    if getattr(knowledge, "version", 1) == 0:
        raise FileNotFoundError(f"no skill library at {cfg.library.uri} (version 0): run the distill stage first "
                                f"(`python -m pipeline.run distill ...` or `make demo`)")
    return knowledge


def pinned_library(cfg: TalentRLConfig, checkpoint: Path):
    """``cfg.library`` pinned to the library version ``checkpoint`` was trained on (its ``talentrl_meta.json``).

    One library version per run: RL continues on the SFT's version, and every system is evaluated on the version
    its checkpoint used (talentrl on its evolved one, the SFT systems and flat_grpo on the SFT's), so skills an RL
    run promoted never leak into a baseline. An explicit ``library.version`` wins.
    """
    import dataclasses

    from .io import read_json

    meta = Path(checkpoint) / "talentrl_meta.json"
    version = read_json(meta).get("library_version") if cfg.library.version == -1 and meta.exists() else None
    return dataclasses.replace(cfg.library, version=int(version)) if version else cfg.library


def rl(cfg: TalentRLConfig, started: Optional[float] = None) -> dict:
    """Contrastive routing RL + GRPO execution RL from the SFT checkpoint (or the flat-GRPO baseline); a finished
    model of the same job is kept, not trained again; ``started``: when the sitting began (``rl.max_minutes``)."""
    from .knowledge import open_knowledge
    from .rl.trainer import train_rl

    paths = ArtifactPaths.of(cfg)
    flat = cfg.rl.flat_baseline
    out = paths.flat_grpo_checkpoint if flat else paths.rl_checkpoint
    family = family_for(cfg)
    knowledge = require_library(open_knowledge(pinned_library(cfg, paths.sft_checkpoint), flat=flat), cfg)
    system = next(s for s in RL_SYSTEMS if SYSTEMS[s].flat == flat)
    with _tracker(cfg, "rl_flat_grpo" if flat else "rl") as tracker:
        info = train_rl(cfg, family, knowledge, str(paths.sft_checkpoint), out, tracker=tracker, started=started,
                        skip_finished=True)
        log_model(tracker, cfg, system, out,
                  {"library_version": getattr(knowledge, "version", None), "sft_checkpoint": str(paths.sft_checkpoint), **info})
        info.update(tracker.metadata())
    return {"checkpoint": str(out), **info}


def rl_both(cfg: TalentRLConfig, systems: tuple[str, ...] = RL_SYSTEMS) -> dict:
    """TalentRL and the flat-GRPO baseline at the same rollout budget (what the pipeline's rl stage runs);
    ``systems`` trains a subset (the Dagster assets ``rl_checkpoint`` / ``flat_grpo_checkpoint`` selected alone)."""
    unknown = set(systems) - set(RL_SYSTEMS)
    if unknown:
        raise ValueError(f"rl: unknown system(s) {sorted(unknown)}; choose from {list(RL_SYSTEMS)}")
    import dataclasses

    from .memory import keep_freed_memory
    from .preemption import stop_signals

    keep_freed_memory()  # opt-in (memory.py)
    flat = dataclasses.replace(cfg, rl=cfg.rl.as_flat_baseline())
    started = time.time()  # one sitting for both systems: rl.max_minutes bounds the stage, not each system
    with stop_signals("rl"):  # and one stop request: a SIGTERM in the first system's last update stops the second
        return {system: rl(flat if SYSTEMS[system].flat else cfg, started) for system in RL_SYSTEMS if system in systems}


def evaluate(cfg: TalentRLConfig) -> dict:
    """Every system on the fixed panels → artifacts/eval/metrics.json, report.md, plots."""
    from .evaluation.runner import evaluate_all
    from .knowledge import open_knowledge

    with _tracker(cfg, "evaluate") as tracker:
        out = evaluate_all(cfg, lambda flat, checkpoint: open_knowledge(pinned_library(cfg, checkpoint), flat=flat))
        log_evaluation(tracker, out["metrics"], out["files"])
        log_report(tracker, cfg, out)
    table = {s: {p: round(b["success"], 3) for p, b in panels.items()} for s, panels in out["metrics"]["systems"].items()}
    return {"report": out["files"].get("report.md"), "metrics_file": out["files"].get("metrics.json"),
            "success": table, "skipped": out["skipped"]}


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage: its function, what it does, and its outputs. Calling the spec runs the stage."""

    run: Callable[..., dict]
    doc: str
    "One line for ``python -m pipeline.run --help``."
    outputs: tuple[tuple[str, str], ...]
    """(Dagster asset, ``ArtifactPaths`` attribute of the folder whose DVC md5 is its data version), in the order of
    the stage's DVC outs; the first is the stage's own asset."""

    def __call__(self, cfg: TalentRLConfig, **kwargs) -> dict:
        return self.run(cfg, **kwargs)

    @property
    def assets(self) -> list[str]:
        return [asset for asset, _ in self.outputs]


STAGES: dict[str, StageSpec] = {
    "collect": StageSpec(collect, "roll out a policy on training tasks -> artifacts/trajectories",
                         (("trajectories", "trajectories"),)),
    "distill": StageSpec(distill, "trajectories -> skills and talents (LanceDB) -> artifacts/library", (("library", "library"),)),
    "sft": StageSpec(sft, "talent-aware SFT -> artifacts/models/sft", (("sft_checkpoint", "sft_checkpoint"),)),
    "rl": StageSpec(rl_both, "routing + execution RL from the SFT checkpoint -> artifacts/models/rl (and the flat-GRPO "
                    "baseline -> artifacts/models/flat_grpo)", tuple((a, a) for a in RL_ASSET_OF_SYSTEM.values())),
    "evaluate": StageSpec(evaluate, "fixed panels, baselines, report -> artifacts/eval", (("evaluation", "eval"),)),
}
"""The pipeline's stages in chain order: the one list every entry point (``pipeline.run``, the Dagster assets,
``pipeline.dvc_sync``, ``pipeline.demo``) and dvc.yaml's stages follow."""
