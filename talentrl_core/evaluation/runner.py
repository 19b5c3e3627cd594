"""Run every system on fixed task panels and write the report (DESIGN.md §6, issue 5).

Systems: ``systems.SYSTEMS`` (one table, each a (checkpoint, routing, retrieval) triple).

Writes ``metrics.json`` (with paired McNemar comparisons), ``report.md``, plots and ``episodes.jsonl`` (one
line per episode) into ``artifacts/eval``.

Panels: ``textworld`` (the fixed eval seeds), ``webshop`` (the 500 test goals), ``alfworld_valid_seen`` / ``alfworld_valid_unseen``, ``qa_<set>``;
``eval.n_per_panel`` (or ``eval.n_by_panel[panel]``) takes a seeded subset (same seed, same tasks for every system). Greedy decoding gives
success and its 95% interval; ``eval.avg_k`` > 0 adds sampled attempts for avg@k.
A system whose checkpoint does not exist yet is skipped and named in the result (never faked).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from ..checkpoints import model_digest, model_job
from ..config import EnvConfig, TalentRLConfig
from ..envs.registry import FAMILIES, panel_family
from ..io import read_json, write_text
from ..paths import ArtifactPaths
from ..rollout import EpisodeSpec, NoKnowledge, RolloutSettings, run_episodes
from .metrics import EpisodeResult, build_metrics, routing_confusion, training_summary
from .report import write_report
from .resume import CHUNK, ChunkCache, add_perf, chunk_key
from ..systems import CHECKPOINTS, NO_CHECKPOINT, RL_CHECKPOINTS, system_spec
from .talent_effect import matrix_from_labels, talent_metrics


def checkpoint_path(paths: ArtifactPaths, which: str) -> Path:
    return getattr(paths, CHECKPOINTS[which])


def system_checkpoint(cfg: TalentRLConfig, paths: ArtifactPaths, which: str) -> tuple[str, bool]:
    """(checkpoint a system loads, whether it is there). zero_shot of ``model.kind=hf`` is the unmodified backbone
    (``model.name_or_path``: a folder, or a Hub id loaded from the local Hugging Face cache); of the tiny model, the
    randomly initialised network the pipeline built."""
    if which == "base" and str(cfg.model.kind) == "hf" and cfg.model.name_or_path:
        ref = cfg.model.name_or_path
        return ref, (Path(ref) / "config.json").exists() or not Path(ref).exists()
    path = checkpoint_path(paths, which)
    return str(path), (path / "config.json").exists()


def panel_env(cfg: TalentRLConfig, panel: str) -> tuple[EnvConfig, str]:
    """(env config, split) of a panel (its family's ``FamilySpec.panels``, ``envs/registry.py``); the run's own env
    settings apply when the families match."""
    name, split = panel_family(panel)
    if cfg.env.name == name:
        return cfg.env, split
    e = EnvConfig.of_family(name, cache_dir=cfg.env.cache_dir)  # the family's own step budget, not the defaults
    for field_name in (f for spec in FAMILIES.values() for f in spec.data_fields):  # every family's data files
        setattr(e, field_name, getattr(cfg.env, field_name))
    return e, split


def floor_policy(spec, seed: int):
    """The acting policy of a zero-parameter system (``systems.FLOORS``, ``strategy:<name>``)."""
    from ..policies import ExpertPolicy, RandomPolicy

    if spec.policy == "random":
        return RandomPolicy(seed)
    return ExpertPolicy(spec.policy.split(":", 1)[1])


def system_policy(cfg: TalentRLConfig, spec, ckpt: str, k: int, loaded: dict):
    """The policy of attempt ``k`` (0: greedy) of a system: a floor's own, or its checkpoint's model (loaded once
    per checkpoint and decoding, kept in ``loaded``)."""
    if spec.checkpoint == NO_CHECKPOINT:
        return floor_policy(spec, cfg.eval.seed * 100003 + k)
    key = (ckpt, k == 0)
    if key not in loaded:
        from ..agent import load_policy

        loaded[key] = load_policy(cfg, ckpt, temperature=0.0 if k == 0 else None)[0]
    return loaded[key]


def gen_stats(policy) -> dict:
    """The generation backend's token counters (empty for a policy without one)."""
    return dict(getattr(getattr(policy, "gen", None), "stats", {}))


def rl_histories(paths: ArtifactPaths, systems) -> dict[str, list[dict]]:
    """The per-update history of every evaluated RL system whose checkpoint records one."""
    out = {}
    for system in systems:
        spec = system_spec(system)
        meta = checkpoint_path(paths, spec.checkpoint) / "talentrl_meta.json" if spec.checkpoint in RL_CHECKPOINTS else None
        if meta is not None and meta.exists():
            out[system] = list(read_json(meta).get("history") or [])
    return out


def run_perf(trajs, seconds: float, before: dict, after: dict) -> dict:
    """Cost of one greedy run: wall seconds, policy steps, prompt tokens asked for and actually prefilled, prompts cut.

    >>> run_perf([], 2.0, {"prompt_tokens": 10, "prefilled_tokens": 4}, {"prompt_tokens": 110, "prefilled_tokens": 44})
    {'seconds': 2.0, 'policy_steps': 0, 'prompt_tokens': 100, 'prefilled_tokens': 40, 'forwards': 0, 'prompts_cut': 0}
    """
    delta = {k: int(after.get(k, 0) - before.get(k, 0))
             for k in ("prompt_tokens", "prefilled_tokens", "forwards", "prompts_cut")}
    return {"seconds": round(seconds, 1), "policy_steps": sum(len(t.steps) for t in trajs), **delta}


def check_one_per_task(trajs, tasks, system: str, panel: str) -> None:
    """Every task of the panel has exactly one trajectory (a lost or doubled episode would bias the rates)."""
    got = sorted(t.task_id for t in trajs)
    want = sorted(t.task_id for t in tasks)
    if got != want:
        counts = Counter(got)
        missing, extra = sorted(set(want) - set(got)), sorted({x for x, n in counts.items() if n > 1} | (set(got) - set(want)))
        raise RuntimeError(f"{system} on {panel}: {len(got)} trajectories for {len(want)} tasks "
                           f"(missing {missing[:5]}, doubled or foreign {extra[:5]})")


def panel_matrices(cfg: TalentRLConfig, knowledge_factory) -> dict:
    """Each panel's strategy × task-type matrix from the library (empty for envs without strategy experts)."""
    knowledge = knowledge_factory(False, ArtifactPaths.of(cfg).sft_checkpoint)
    lib = getattr(knowledge, "lib", None)
    out = {}
    for panel in cfg.eval.panels:
        env = str(panel_env(cfg, panel)[0].name)
        if lib is not None:
            shown = {t.talent_id: t.shown for t in knowledge.menu(env)}
            out[panel] = matrix_from_labels(lib.labels(env), shown)
    return out


def open_panel(cfg: TalentRLConfig, panel: str, progress: bool):
    """(family, tasks, rollout settings) of one panel, its games prepared."""
    from ..envs import make_family

    env_cfg, split = panel_env(cfg, panel)
    family = make_family(env_cfg, Path(env_cfg.cache_dir))
    tasks = family.tasks(split, cfg.eval.panel_size(panel), cfg.eval.seed)
    family.prepare(tasks, workers=max(1, cfg.collect.workers), progress=progress)
    settings = RolloutSettings.of(env_cfg, run_id=f"eval-{panel}", split=split)
    return family, tasks, settings


def route_probability(t) -> Optional[float]:
    """The probability of ``t``'s routing completion (its menu-constrained token log-probs summed): the router's
    confidence in the talent it chose. None when the episode has no policy routing step with log-probs."""
    step = next((s for s in t.steps if s.is_routing), None)
    return round(math.exp(sum(step.logprobs)), 4) if step is not None and step.logprobs else None


def cue_read(t, cue) -> Optional[bool]:
    """Whether ``t``'s router restated the cue its routing prompt shows (``env.routing_cue``); None without a cue or a
    policy routing step."""
    step = next((s for s in t.steps if s.is_routing), None)
    if cue is None or step is None or not step.completion:
        return None
    shown = cue.read(json.loads(step.prompt)[-1]["content"])
    return shown is not None and cue.split(step.completion)[0] == cue.format(shown)


def episode_result(system: str, panel: str, t, knowledge, sample_idx: int, cue=None) -> EpisodeResult:
    """One evaluated trajectory as a row of episodes.jsonl; ``knowledge`` (None for systems without skills) names
    the task's oracle talent; ``cue`` (``env.routing_cue``) checks the router's restated cue. An episode whose
    environment crashed keeps its error flag and counts as a failure."""
    oracle = knowledge.oracle_talent(t.env, t.task_type, t.task_id) if knowledge is not None else None
    return EpisodeResult(
        system=system, panel=panel, task_id=t.task_id, task_type=t.task_type, success=bool(t.success),
        reward=float(t.final_reward), tokens=sum(s.prompt_tokens + s.completion_tokens for s in t.steps),
        chosen_talent=t.talent_id, oracle_talent=oracle, sample_idx=sample_idx,
        error=bool(t.error), n_steps=t.n_steps, n_invalid=t.n_invalid, route_p=route_probability(t),
        cue_read=cue_read(t, cue), n_repeated=t.n_repeated(),
    )


class SystemRun:
    """One system on one panel, played in resumable chunks (``resume.ChunkCache``): a chunk already played under the
    same key is read, the others run and are kept as they finish. The policy is loaded only when a chunk runs."""

    def __init__(self, cfg: TalentRLConfig, panel: str, system: str, spec, ckpt: str, knowledge, policies: dict,
                 cache: ChunkCache, progress: bool):
        self.cfg, self.panel, self.system, self.spec, self.ckpt = cfg, panel, system, spec, ckpt
        self.knowledge, self.policies, self.cache, self.progress = knowledge, policies, cache, progress
        self.identity = {"system": system, "checkpoint": model_digest(ckpt) if ckpt else "",
                         "library": getattr(knowledge, "version", None), "model": model_job(cfg.model)}

    def attempt(self, family, tasks, settings, k: int) -> tuple[list[EpisodeResult], dict]:
        """(episode rows, cost) of attempt ``k`` (0: greedy) over ``tasks``."""
        ev, spec, rows, cost = self.cfg.eval, self.spec, [], None
        for start in range(0, len(tasks), CHUNK):
            chunk = tasks[start:start + CHUNK]
            key = chunk_key(**self.identity, k=k, seed=ev.seed, settings=settings, tasks=[t.task_id for t in chunk])
            got = self.cache.get(self.panel, self.system, k, start, key)
            if got is None:
                policy = (floor_policy(spec, ev.seed * 100003 + 7919 * k + start) if spec.checkpoint == NO_CHECKPOINT
                          else system_policy(self.cfg, spec, self.ckpt, k, self.policies))
                policy.name = self.system
                specs = [EpisodeSpec(t, routing=spec.routing, use_skills=spec.use_skills,
                                     seed=ev.seed * 100003 + 7919 * k + start + i) for i, t in enumerate(chunk)]
                t0, before = time.perf_counter(), gen_stats(policy)
                trajs = run_episodes(family.make, specs, policy, dataclasses.replace(settings, checkpoint=self.ckpt),
                                     self.knowledge, self.cfg.collect.batch_size, self.progress)
                check_one_per_task(trajs, chunk, self.system, self.panel)
                know = self.knowledge if spec.use_skills else None
                got = {"rows": [dataclasses.asdict(episode_result(self.system, self.panel, t, know, k, settings.routing_cue))
                                 for t in trajs],
                       "perf": run_perf(trajs, time.perf_counter() - t0, before, gen_stats(policy))}
                self.cache.put(self.panel, self.system, k, start, key, got["rows"], got["perf"])
            rows += [EpisodeResult(**r) for r in got["rows"]]
            cost = add_perf(cost, got["perf"])
        return rows, cost or {}


def evaluate_all(cfg: TalentRLConfig, knowledge_factory, progress: bool = True) -> dict:
    """Evaluate ``cfg.eval.systems`` on ``cfg.eval.panels``; write metrics.json, report.md and plots.

    ``knowledge_factory(flat, checkpoint)`` opens the library for a system: flat or not, at the version that
    system's checkpoint trained on (``stages.pinned_library``); ``metrics["library_versions"]`` records them.
    """
    from ..threads import follow_free_cpus

    follow_free_cpus(cfg.model.threads)  # the process's thread governor: the rollout loop re-checks it every turn
    paths = ArtifactPaths.of(cfg)
    ev = cfg.eval
    cache = ChunkCache(paths.eval)
    results: list[EpisodeResult] = []
    skipped: dict[str, str] = {}
    policies: dict[str, object] = {}
    perf: dict[str, dict] = {}
    versions: dict[str, Optional[int]] = {}
    for panel in ev.panels:
        family, tasks, settings = open_panel(cfg, panel, progress)
        for system in ev.systems:
            spec = system_spec(system)
            ckpt, present = ("", True) if spec.checkpoint == NO_CHECKPOINT else system_checkpoint(cfg, paths, spec.checkpoint)
            if not present:
                skipped[system] = f"no checkpoint at {ckpt}"
                continue
            if not spec.use_skills and spec.routing == "none":
                knowledge = NoKnowledge()
            else:
                knowledge = knowledge_factory(spec.flat, checkpoint_path(paths, spec.checkpoint))
                versions[system] = knowledge.version
            run = SystemRun(cfg, panel, system, spec, ckpt, knowledge, policies, cache, progress)
            for k in range(ev.avg_k + 1):  # k = 0: greedy; 1..avg_k: sampled
                rows, cost = run.attempt(family, tasks, settings, k)
                if k == 0:
                    perf.setdefault(system, {})[panel] = cost
                results += rows
    if not results:
        raise RuntimeError(f"nothing to evaluate: {skipped or 'no systems/panels configured'}")
    metrics = build_metrics(results, ci=ev.ci, seed=ev.seed)
    metrics["skipped_systems"] = skipped
    metrics["perf"] = perf
    metrics["library_versions"] = versions
    metrics["zero_shot_model"] = ("the unmodified backbone " + cfg.model.name_or_path if str(cfg.model.kind) == "hf"
                                  else "the tiny model's random initialisation (trained from scratch: zero_shot is a floor, not a pretrained baseline)")
    metrics["talents"] = talent_metrics(results, panel_matrices(cfg, knowledge_factory))
    histories = rl_histories(paths, [s for s in ev.systems if s not in skipped])
    if histories:
        metrics["training"] = {s: training_summary(h) for s, h in histories.items()}
    files = write_report(metrics, paths.eval, confusion=routing_confusion(results), histories=histories)
    episodes = paths.eval / "episodes.jsonl"  # per-episode results: recompute any statistic without re-running
    write_text(episodes, "".join(json.dumps(dataclasses.asdict(r), sort_keys=True) + "\n" for r in results))
    files["episodes.jsonl"] = str(episodes)
    cache.clear()
    return {"metrics": metrics, "files": {k: str(v) for k, v in files.items()}, "skipped": skipped}
