"""What a trained TextWorld executor does, against chance: route following and immediate reversals.

Runs one checkpoint of a finished pipeline (``artifacts/``) greedily on the evaluation panel's tasks of one
task type, under a chosen routing, and prints per task type:

* **success**;
* **first move = stated route** — the share of episodes (goal states a route) whose first move is the route's first
  direction, against chance (the mean of 1 / the number of exits at the first decision): the ratio says whether the
  executor reads the directions in the goal at all;
* **immediate reversal** — the share of moves that walk straight back the way the agent came while another exit was
  open, against chance at the same decisions (1 / the number of exits there). No strategy expert ever does that
  outside a dead end, so a ratio near 1 means the executor does not use its own last action.

``--show`` prints each episode's talent, stated route and actions. Run on a machine where the pipeline ran:

    .venv/bin/python bench/bench_behaviour.py --task-type tw-coin_collector --routing oracle -n 50
    .venv/bin/python bench/bench_behaviour.py --task-type tw-coin_collector-hidden --routing random --show
    .venv/bin/python bench/bench_behaviour.py --checkpoint rl --routing policy experiment=demo

Overrides after the options are Hydra overrides (default ``experiment=demo``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from talentrl_core.envs.textworld.strategies import REVERSE, goal_route  # noqa: E402


def exits(admissible: Optional[list[str]]) -> int:
    return max(1, sum(1 for a in admissible or () if a.startswith("go ")))


def behaviour(trajs) -> dict:
    """Success, route following and reversal figures of TextWorld trajectories, each with its chance level."""
    first, first_chance, rev, rev_chance = [], [], [], []
    for t in trajs:
        steps = [s for s in t.env_steps() if s.action]
        route = goal_route(t.goal)
        gos = [s for s in steps if s.action.startswith("go ")]
        if route and gos:
            first.append(gos[0].action == f"go {route[0]}")
            first_chance.append(1 / exits(gos[0].admissible))
        for prev, s in zip(gos, gos[1:]):
            n = exits(s.admissible)
            if n > 1:  # another exit was open: walking back was a choice
                rev.append(s.action == f"go {REVERSE[prev.action[3:]]}")
                rev_chance.append(1 / n)

    def ratio(a, b):
        return round(mean(a) / mean(b), 2) if a and b and mean(b) else None

    return {
        "episodes": len(trajs),
        "success": round(mean(bool(t.success) for t in trajs), 3) if trajs else None,
        "first_move_on_route": round(mean(first), 3) if first else None,
        "first_move_chance": round(mean(first_chance), 3) if first_chance else None,
        "first_move_vs_chance": ratio(first, first_chance),
        "reversal": round(mean(rev), 3) if rev else None,
        "reversal_chance": round(mean(rev_chance), 3) if rev_chance else None,
        "reversal_vs_chance": ratio(rev, rev_chance),
    }


def run(checkpoint: str, routing: str, task_type: Optional[str], n: int, overrides: list[str]):
    from pipeline.config import load_config
    from talentrl_core.agent import load_policy
    from talentrl_core.envs import make_family
    from talentrl_core.evaluation.runner import checkpoint_path, panel_env
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
    from talentrl_core.stages import pinned_library

    cfg = load_config(overrides)
    ckpt = checkpoint_path(ArtifactPaths.of(cfg), checkpoint)
    env_cfg, split = panel_env(cfg, "textworld")
    family = make_family(env_cfg, Path(env_cfg.cache_dir))
    tasks = [t for t in family.tasks(split, cfg.eval.panel_size("textworld"), cfg.eval.seed)
             if task_type is None or t.task_type == task_type][:n]
    knowledge = open_knowledge(pinned_library(cfg, ckpt), flat=routing == "none")
    policy = load_policy(cfg, str(ckpt), temperature=0.0, name=f"{checkpoint}-{routing}")[0]
    settings = RolloutSettings.of(env_cfg, run_id="bench-behaviour", split=split)
    specs = [EpisodeSpec(t, routing=routing, use_skills=True, seed=i) for i, t in enumerate(tasks)]
    trajs = run_episodes(family.make, specs, policy, settings, knowledge, cfg.collect.batch_size, False)
    menu = {t.talent_id: t.shown for t in knowledge.menu("textworld")}
    return trajs, menu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="sft", choices=["sft", "rl", "flat_grpo"])
    p.add_argument("--routing", default="oracle", choices=["oracle", "random", "policy", "none"])
    p.add_argument("--task-type", default=None, help="one task type of the panel (default: all)")
    p.add_argument("-n", type=int, default=50, help="episodes (the first n panel tasks of the type)")
    p.add_argument("--show", action="store_true", help="print every episode's actions")
    p.add_argument("overrides", nargs="*", default=["experiment=demo"])
    args = p.parse_args(argv)
    trajs, menu = run(args.checkpoint, args.routing, args.task_type, args.n, args.overrides or ["experiment=demo"])
    if args.show:
        for t in trajs:
            acts = [s.action for s in t.steps if s.action]
            print(f"{int(bool(t.success))} {menu.get(t.talent_id, '-')} route={goal_route(t.goal)} {acts}")
    by_type: dict[str, list] = {}
    for t in trajs:
        by_type.setdefault(t.task_type, []).append(t)
    print(f"checkpoint={args.checkpoint} routing={args.routing}")
    for tt, ts in sorted(by_type.items()):
        print(tt, behaviour(ts))
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_behaviour")(main)())
