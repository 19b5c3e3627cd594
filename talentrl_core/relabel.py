"""``relabel_sft``: the fairest non-RL competitor of routing RL (issue 38).

Routing RL with matched talent arms measures, task by task, which talent the student itself executes best, and moves
the router towards it. The same information can be had without RL: roll out every talent of the menu on training
tasks with the SFT student once (``measure``), label each task with the talent whose rollouts scored best
(``winners``; a tie gives no label), and fine-tune the router on those labels with the ordinary SFT loss
(``relabel_sft``: routing samples only, from the SFT checkpoint). Given as many rollouts as RL used, relabel_sft
matching talentrl says the gain is the reward-measured label, not the RL update.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from .config import TalentRLConfig
from .envs.base import Task
from .rollout import EpisodeSpec, Knowledge, RolloutSettings, run_episodes
from .trajectories import Trajectory


def measure(cfg: TalentRLConfig, family, knowledge: Knowledge, checkpoint: str, n_tasks: int, rollouts: int,
            seed: int = 0) -> list[Trajectory]:
    """``rollouts`` sampled episodes (``model.temperature``) of every menu talent on ``n_tasks`` training tasks drawn
    with ``seed``: ``n_tasks × |menu| × rollouts``. Where ``n_tasks`` is more than there are (RL draws its tasks
    again and again), every task is measured with the rollouts of the draws it stands for, so that the budget is
    kept (``kept_budget``); ``n_tasks`` 0: every task, ``rollouts`` each."""
    from .agent import load_policy

    pool = family.tasks(cfg.rl.split)
    tasks = random.Random(seed).sample(pool, n_tasks) if 0 < n_tasks < len(pool) else list(pool)
    rollouts = kept_budget(n_tasks, rollouts, len(tasks))
    family.prepare(tasks, workers=1, progress=False)
    policy, _ = load_policy(cfg, checkpoint, name="relabel")
    menu = knowledge.menu(family.name)
    specs = [EpisodeSpec(t, routing="fixed", talent_id=m.talent_id, arm=k, group_uid=f"relabel-{t.task_id}",
                         seed=seed * 1_000_003 + i * rollouts + j)
             for i, t in enumerate(tasks) for k, m in enumerate(menu) for j in range(rollouts)]
    settings = RolloutSettings.of(cfg.env, run_id="relabel", split=cfg.rl.split, checkpoint=checkpoint)
    return run_episodes(family.make, specs, policy, settings, knowledge, batch_size=cfg.rl.rollout_batch_size)


def kept_budget(n_tasks: int, rollouts: int, pool: int) -> int:
    """Rollouts per (task, talent) that spend ``n_tasks × rollouts`` on a pool of ``pool`` tasks (rounded up).

    >>> kept_budget(1200, 4, 300), kept_budget(100, 4, 100), kept_budget(0, 4, 300), kept_budget(10, 3, 4)
    (16, 4, 4, 8)
    """
    return max(rollouts, -(-n_tasks * rollouts // pool)) if n_tasks > pool > 0 else rollouts


def winners(trajs: Sequence[Trajectory]) -> dict[str, Optional[str]]:
    """Task id → the talent whose episodes scored the highest mean reward (None on a tie).

    >>> from talentrl_core.trajectories import Trajectory as T
    >>> def t(task, talent, r):
    ...     x = T("r", "textworld", "train", task, "x", "{}", talent_id=talent)
    ...     x.final_reward = r
    ...     return x
    >>> winners([t("a", "T1", 1.0), t("a", "T2", 0.0), t("b", "T1", 1.0), t("b", "T2", 1.0)])
    {'a': 'T1', 'b': None}
    """
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        if t.talent_id and not t.error:
            scores[t.task_id][t.talent_id].append(t.final_reward)
    out: dict[str, Optional[str]] = {}
    for task, by in scores.items():
        means = sorted(((sum(r) / len(r), talent) for talent, r in by.items()), reverse=True)
        out[task] = means[0][1] if len(means) == 1 or means[0][0] > means[1][0] else None
    return out


def routing_data(trajs: Sequence[Trajectory], knowledge: Knowledge, obs_chars: int, cue=None):
    """``SFTData`` of one routing sample per task with a winner, its prompt as SFT, RL and evaluation build it (the
    restated cue, where ``cue`` is set, before the winner's talent)."""
    from .prompts import format_talent, routing_prompt, shown_id
    from .sft_data import SFTData, restated_cue

    best = winners(trajs)
    first = {t.task_id: t for t in trajs}
    samples = []
    for task_id, talent in sorted(best.items()):
        if talent is None:
            continue
        t = first[task_id]
        menu = knowledge.menu(t.env)
        msgs = routing_prompt(t.env, t.goal, t.initial_observation, menu, obs_chars) + [
            {"role": "assistant", "content": restated_cue(cue, t, obs_chars) + format_talent(shown_id(menu, talent))}]
        samples.append({"messages": msgs, "kind": "route", "task_id": task_id, "talent_id": talent, "skill_ids": [],
                        "weight": 1})
    report = {"tasks": len(best), "labelled": len(samples), "ties": sum(v is None for v in best.values()),
              "episodes": len(trajs), "label_distribution": _count(s["talent_id"] for s in samples)}
    if not samples:
        raise ValueError(f"relabel: every one of the {len(best)} measured tasks is a tie: no routing label to train on")
    return SFTData(samples, report)


def _count(xs) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def measured_data(cfg: TalentRLConfig, family, knowledge: Knowledge, checkpoint: str, n_tasks: int, rollouts: int,
                  seed: int, keep: Optional[Path] = None):
    """The winners' routing samples (``routing_data`` of ``measure``); with ``keep``, read from that file when it is
    there and written to it (atomically) when measured, so that the measurement, the costly part, is made once."""
    from .io import read_json, write_json
    from .prompts import routing_cue
    from .sft_data import SFTData

    if keep is not None and keep.is_file():
        d = read_json(keep)
        return SFTData(d["samples"], d["report"])
    trajs = measure(cfg, family, knowledge, checkpoint, n_tasks, rollouts, seed)
    data = routing_data(trajs, knowledge, cfg.env.routing_obs_chars,
                        routing_cue(cfg.env.routing_cue, cfg.env.routing_cue_values))
    if keep is not None:
        write_json(keep, {"samples": data.samples, "report": data.report})
    return data


def relabel_sft(cfg: TalentRLConfig, family, knowledge: Knowledge, checkpoint: str, out_dir: Path, n_tasks: int,
                rollouts: int, steps: int, seed: int = 0, lr: Optional[float] = None,
                keep: Optional[Path] = None, replay=None, batch_size: Optional[int] = None) -> dict:
    """Measure the student's talents on ``n_tasks`` tasks (``rollouts`` each; ``keep``: ``measured_data``), then
    ``steps`` SFT steps of the router on the winners from ``checkpoint`` into ``out_dir``, no warm-up, at ``lr``
    (default the SFT's; the routing study passes RL's, the same optimiser budget as the RL it is compared with: at
    the SFT's 20× larger rate, 75 steps on routing samples alone wrecked the executor, 0.155 success). ``replay``
    (an ``SFTData``, the draw's SFT samples): its execution samples are trained beside the relabelled routing ones,
    at the SFT's routing weight, so that the executor is rehearsed while the router learns (against forgetting).
    ``batch_size``: samples per step (default the SFT's). A checkpoint every quarter of the steps, so that a run
    stopped part-way resumes (75 steps of RL's batch take most of an hour on 2 cores)."""
    from .sft import train_sft
    from .sft_data import SFTData

    data = measured_data(cfg, family, knowledge, checkpoint, n_tasks, rollouts, seed, keep)
    if replay is not None:
        execs = [smp for smp in replay.samples if smp["kind"] != "route"]
        data = SFTData(data.samples + execs, {**data.report, "replayed_exec_samples": len(execs)})
    sft_cfg = replace(cfg.sft, max_steps=steps, warmup_steps=0, routing_warmup_steps=0,
                      routing_warmup_until=0.0, demonstrator_habit={}, seed=seed, min_skill_share=0.0,
                      lr=cfg.sft.lr if lr is None else lr, routing_weight=cfg.sft.routing_weight if replay else 1,
                      batch_size=batch_size or cfg.sft.batch_size,
                      save_steps=min(cfg.sft.save_steps, max(1, steps // 4)))  # an interrupted run resumes, as RL's
    info = train_sft(data, checkpoint, out_dir, sft_cfg, cfg.model,
                     meta={"relabel": data.report, "init": str(checkpoint), "lr": sft_cfg.lr,
                           "library_version": getattr(knowledge, "version", None), "env": family.name})
    return {"checkpoint": str(out_dir), "relabel": data.report, **info}
