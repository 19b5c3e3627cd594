"""A learning curve: every saved SFT checkpoint played greedily on a held-out panel (issues 39, 40: an SFT sized
from measurement, not assumed).

The SFT stage keeps its resumable checkpoints in ``<sft>.work/checkpoint-<step>`` (``sft.keep_checkpoints: 0``
keeps them all). Each is evaluated as the SFT systems are (``systems.SYSTEMS``: its checkpoint replaced by the
step's), on the same tasks with the same seeds, so the points differ only in training. Read it on a held-out split
that is not the test panel (WebShop: ``webshop_dev``, ``env.webshop_n_dev``), or the curve chooses the run.

A curve resumes: rows of an earlier call (``done``) are kept for every (step, system) whose checkpoint still has the
same weights (``checkpoints.model_digest``) and whose tasks are the panel's, so a curve read while SFT runs plays
only the checkpoints saved since (ALFWorld: tens of minutes a point on 2 cores). Inside a point the tasks are played
in chunks of ``resume.CHUNK``, each kept as it finishes (``cache``), so a stopped point loses one chunk at most.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Sequence

from ..checkpoints import model_digest, step_folders
from ..paths import ArtifactPaths
from ..rollout import EpisodeSpec, NoKnowledge, run_episodes
from ..systems import SYSTEMS
from ..workdir import work_dir
from .resume import CHUNK, ChunkCache, chunk_key
from .stats import bootstrap_ci, wilson_ci

CURVE_SYSTEMS = ("talent_sft", "flat_skillbank")
"What a curve point plays by default: the policy routing, and the same checkpoint flat."


def curve_checkpoints(paths: ArtifactPaths, dagger_rounds: int = 0) -> list[tuple[int, Path]]:
    """(step, folder) of every saved SFT checkpoint, by step; a ValueError when there is none.

    With DAgger rounds (``sft.dagger_rounds``) the SFT is several runs in a row (``dagger``: ``round-0`` behaviour
    cloning, ``round-r``, then the SFT checkpoint itself, each with its own ``.work``): a round's checkpoint-s stands
    at the steps of the rounds before it plus s (the last step saved in each), so the curve runs on across rounds.
    """
    from ..dagger import dagger_root

    final = paths.sft_checkpoint
    runs = [dagger_root(final) / f"round-{r}" for r in range(dagger_rounds)] + [final]
    found, offset = [], 0
    for run in runs:
        saved = step_folders(work_dir(run), must_hold="config.json")
        found += [(offset + step, folder) for step, folder in saved]
        offset += saved[-1][0] if saved else 0
    if not found:
        raise ValueError(f"no SFT checkpoint under {final.name}.work in {final.parent}: run the sft stage "
                         "(sft.keep_checkpoints: 0 keeps every checkpoint-<step> it saves) before a learning curve")
    return found


def point(rows: Sequence[dict], seed: int = 0) -> dict:
    """Success (Wilson 95%) and score (mean reward x 100, bootstrap 95%) of one (step, system).

    >>> point([{"success": True, "reward": 1.0}, {"success": False, "reward": 0.5}])["score"]
    75.0
    """
    n, wins = len(rows), sum(bool(r["success"]) for r in rows)
    rewards = [100.0 * float(r["reward"]) for r in rows]
    lo, hi = bootstrap_ci(rewards, seed=seed) if n else (0.0, 0.0)
    return {"n": n, "success": round(wins / n, 4) if n else 0.0, "success_ci95": [round(x, 4) for x in wilson_ci(wins, n)],
            "score": round(sum(rewards) / n, 2) if n else 0.0, "score_ci95": [round(lo, 2), round(hi, 2)]}


def weights_id(folder: Path) -> str:
    """A short id of a checkpoint's weights and tokenizer (equal files, equal id; wherever the folder lies)."""
    return hashlib.sha1(json.dumps(model_digest(folder)).encode()).hexdigest()[:16]


def reusable(done: Sequence[dict], panel: str, task_ids: Sequence[str]) -> dict[tuple, list[dict]]:
    """Rows of an earlier curve call by (step, system, weights): only complete points on exactly this panel's tasks.

    >>> rows = [{"step": 5, "system": "s", "weights": "w", "panel": "p", "task_id": t} for t in ("a", "b")]
    >>> list(reusable(rows, "p", ["a", "b"])), list(reusable(rows, "p", ["a", "b", "c"])), list(reusable(rows, "q", ["a", "b"]))
    ([(5, 's', 'w')], [], [])
    """
    by: dict[tuple, list[dict]] = {}
    for r in done:
        if r.get("panel") == panel and r.get("weights"):
            by.setdefault((r["step"], r["system"], r["weights"]), []).append(r)
    return {k: v for k, v in by.items() if sorted(r["task_id"] for r in v) == sorted(task_ids)}


def learning_curve(cfg, panel: str, knowledge_factory: Callable, load_policy: Callable,
                   systems: Sequence[str] = CURVE_SYSTEMS, progress: bool = False,
                   done: Sequence[dict] = (), log: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
                   steps: Sequence[int] | None = None, cache: ChunkCache | None = None) -> tuple[list[dict], dict]:
    """(episode rows, {system: [point per step]}) over every saved SFT checkpoint on ``panel``.

    ``knowledge_factory(flat)`` opens the library the SFT trained on; ``load_policy(checkpoint)`` a greedy policy;
    ``done``: rows of an earlier call, reused where their checkpoint is unchanged (module doc); ``steps``: play only
    these checkpoints (the points a report fixed in advance; a step not saved yet is not played), while the kept
    points of the others stay in the curve; ``cache``: where finished chunks of a point are kept (module doc).
    """
    from .runner import open_panel

    family, tasks, settings = open_panel(cfg, panel, progress)
    rows: list[dict] = []
    curve: dict[str, list[dict]] = {s: [] for s in systems}
    knowledge = {flat: knowledge_factory(flat) for flat in {SYSTEMS[s].flat for s in systems}}
    kept = reusable(done, panel, [t.task_id for t in tasks])
    for step, ckpt in curve_checkpoints(ArtifactPaths.of(cfg), cfg.sft.dagger_rounds):
        if steps is not None and step not in steps and not any(k[0] == step for k in kept):
            continue  # neither played nor kept: its weights need no hashing
        weights, policy_of = weights_id(ckpt), functools.cache(functools.partial(load_policy, str(ckpt)))  # loaded once, if played
        for system in systems:
            got = kept.get((step, system, weights))
            if got is not None:
                log(f"curve: step {step} {system}: {len(got)} episodes kept from the earlier call")
            elif steps is not None and step not in steps:
                continue
            else:
                spec = SYSTEMS[system]
                kn = knowledge[spec.flat] if spec.use_skills or spec.routing != "none" else NoKnowledge()
                got = play_point(cfg, (family, tasks, settings), spec, kn, policy_of, cache, progress,
                                 {"step": step, "system": system, "weights": weights, "panel": panel})
            rows += got
            curve[system].append({"step": step, **point(got, cfg.eval.seed)})
    return rows, {"panel": panel, "n_tasks": len(tasks), "curve": curve}


def play_point(cfg, panel: tuple, spec, knowledge, policy_of: Callable, cache: ChunkCache | None, progress: bool,
               meta: dict) -> list[dict]:
    """The rows of one (step, system) on ``panel`` (family, tasks, rollout settings), in chunks of ``CHUNK`` tasks;
    a chunk kept in ``cache`` under the same key (the point's ``meta``: step, system, weights, panel; its tasks, the
    seed, the settings) is read back, the others are played (``policy_of()`` loads the policy once) and kept."""
    family, tasks, settings = panel
    rows: list[dict] = []
    name = f"{meta['system']}-step{meta['step']}"
    for start in range(0, len(tasks), CHUNK):
        chunk = tasks[start:start + CHUNK]
        key = chunk_key(**meta, seed=cfg.eval.seed, settings=settings, tasks=[t.task_id for t in chunk])
        got = cache.get(meta["panel"], name, 0, start, key) if cache is not None else None
        if got is None:
            specs = [EpisodeSpec(t, routing=spec.routing, use_skills=spec.use_skills,
                                 seed=cfg.eval.seed * 100003 + start + i) for i, t in enumerate(chunk)]
            trajs = run_episodes(family.make, specs, policy_of(), settings, knowledge, cfg.collect.batch_size, progress)
            got = {"rows": [{**meta, "task_id": t.task_id, "task_type": t.task_type, "success": bool(t.success),
                             "reward": float(t.final_reward), "n_steps": t.n_steps, "n_invalid": t.n_invalid,
                             "error": bool(t.error), "talent": t.talent_id} for t in trajs]}
            if cache is not None:
                cache.put(meta["panel"], name, 0, start, key, got["rows"], {})
        rows += got["rows"]
    return rows
