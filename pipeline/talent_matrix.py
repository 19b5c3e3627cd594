"""The policy's own strategy × task-type matrix: a checkpoint's greedy success on the evaluation panel with every
talent forced in turn (routing ``fixed``). The experts' matrix says what each strategy *can* do; this one says
whether the trained executor *does* what its talent says (a large gap between talents on a task type) or ignores it.

    .venv/bin/python -m pipeline.talent_matrix experiment=demo --checkpoint artifacts/models/sft --out docs/results/x

Writes ``episodes.jsonl`` (one row per task × talent) and ``metrics.json`` (the matrix, each type's best-minus-mean
gap and the expected oracle-minus-random gain it implies) into ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pipeline.errors import named_errors


def talent_matrix(cfg, checkpoint: str, n: int) -> tuple[list[dict], dict]:
    from talentrl_core.agent import load_policy
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.rollout import EpisodeSpec, run_episodes
    from talentrl_core.stages import family_for, pinned_library, rollout_settings

    family = family_for(cfg)
    tasks = family.tasks("eval", n or cfg.eval.n_per_panel, cfg.eval.seed)
    family.prepare(tasks, workers=max(1, cfg.collect.workers), progress=False)
    knowledge = open_knowledge(pinned_library(cfg, Path(checkpoint)))  # no recorded version (a Hub id): cfg's
    policy = load_policy(cfg, checkpoint, temperature=0.0, name="fixed_talent")[0]
    rows: list[dict] = []
    for talent in knowledge.menu(cfg.env.name):
        specs = [EpisodeSpec(t, routing="fixed", talent_id=talent.talent_id, use_skills=True, seed=i) for i, t in enumerate(tasks)]
        for t in run_episodes(family.make, specs, policy, rollout_settings(cfg, "talent-matrix", "eval"), knowledge,
                              cfg.collect.batch_size, False):
            rows.append({"task_id": t.task_id, "task_type": t.task_type, "talent": talent.shown, "talent_name": talent.name,
                         "success": bool(t.success), "n_steps": t.n_steps, "error": bool(t.error),
                         "actions": [s.action for s in t.steps]})
    return rows, summarise(rows, checkpoint)


def summarise(rows: list[dict], checkpoint: str) -> dict:
    cells: dict[str, dict[str, list[bool]]] = {}
    for r in rows:
        cells.setdefault(r["task_type"], {}).setdefault(f"{r['talent']} {r['talent_name']}", []).append(r["success"])
    matrix = {ty: {k: round(sum(v) / len(v), 4) for k, v in sorted(d.items())} for ty, d in sorted(cells.items())}
    gap = {ty: round(max(d.values()) - sum(d.values()) / len(d), 4) for ty, d in matrix.items()}
    return {"checkpoint": checkpoint, "n_tasks": len({r["task_id"] for r in rows}), "matrix": matrix,
            "best_minus_mean": gap, "oracle_minus_random_bound": round(sum(gap.values()) / max(1, len(gap)), 4)}


@named_errors("pipeline.talent_matrix")
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.diagnostic_cli import run_diagnostic

    def add_args(p):
        p.add_argument("--checkpoint", required=True)
        p.add_argument("-n", type=int, default=0, help="tasks (default eval.n_per_panel)")

    return run_diagnostic("python -m pipeline.talent_matrix", __doc__, add_args,
                          lambda cfg, args: talent_matrix(cfg, args.checkpoint, args.n), argv)


if __name__ == "__main__":
    sys.exit(main())
