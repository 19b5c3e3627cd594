"""WebShop's observation-only teachers and their query variants, per goal category: is there anything to route?

Issue 40 asks for WebShop talents whose best choice differs per task. The registered teachers
(``talentrl_core/envs/webshop/strategies.py``) search the whole instruction; this bench also plays, unregistered
(so that no collection picks them up), the same teachers starting from the other query candidates of
``queries.search_candidates``: the instruction without its option and price clauses (``base_*``) and its first
clause (``clause_*``), each opening results in page order (``*_rank``) or by title overlap (``*_title``), and the rule
baseline with options as a floor. It prints success / score (mean reward × 100) per strategy and goal category, the
score of an oracle that picks the best strategy per goal, and how many goals each strategy (alone or tied) wins.
Goals come from the training split (never the test goals), sampled with a fixed seed; ``env.webshop_search`` is the
experiment's (``choice``). A strategy's episode is deterministic, so the figures reproduce exactly.

    nice -n 10 .venv/bin/python bench/bench_strategies_webshop.py --n 600 --json /tmp/webshop_matrix.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.errors import named_errors  # noqa: E402
from talentrl_core.envs.webshop.strategies import teacher  # noqa: E402

VARIANTS = {"base_rank": (1, False), "clause_rank": (2, False), "base_title": (1, True), "clause_title": (2, True)}
"Unregistered teachers: (first query candidate, open results by title overlap)."
REGISTERED = ["rank_order", "title_order", "rule_options"]


def register_variants() -> None:
    """The query variants, registered in this process only and as non-teachers (no collection here picks them)."""
    from talentrl_core.envs.strategies import Strategy, register

    for name, (first, by_title) in VARIANTS.items():
        register(Strategy("webshop", name, f"the teacher from query candidate {first}, by title: {by_title}",
                          teacher(first, by_title), teacher=False))


def play(env, task, name: str, max_steps: int) -> dict[str, Any]:
    """One deterministic episode of strategy ``name``: its reward (WebShop's purchase score), won, steps."""
    env.reset(task)
    steps = 0
    while steps < max_steps and (action := env.strategy_action(name)) is not None:
        res, steps = env.step(action), steps + 1
        if res.done:
            return {"reward": float(res.reward), "won": bool(res.won), "steps": steps}
    return {"reward": 0.0, "won": False, "steps": steps}


def summarise(rows: list[dict], names: list[str]) -> dict[str, Any]:
    """Per category and overall: success and score per strategy; the per-goal oracle over the teachers; the goals
    each set of tied-best teachers wins."""
    cells: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    goals: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        for cat in (r["category"], "all"):
            cells[cat][r["strategy"]].append(r)
        goals[r["goal"]][r["strategy"]] = r["reward"]
    table = {cat: {s: {"n": len(v), "success": sum(x["won"] for x in v) / len(v),
                       "score": 100 * sum(x["reward"] for x in v) / len(v)} for s, v in by.items()}
             for cat, by in cells.items()}
    teachers = [n for n in names if n != "rule_options"]
    best = Counter()
    for rewards in goals.values():
        top = max(rewards[s] for s in teachers)
        winners = tuple(s for s in teachers if rewards[s] == top)
        best["(all tie)" if len(winners) == len(teachers) else " = ".join(winners)] += 1
    oracle = 100 * sum(max(g[s] for s in teachers) for g in goals.values()) / max(len(goals), 1)
    return {"by_category": table, "oracle_score": oracle, "best_per_goal": dict(best.most_common())}


def report(summary: dict[str, Any], names: list[str]) -> str:
    lines = ["| category | n | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for cat, by in sorted(summary["by_category"].items(), key=lambda kv: (kv[0] == "all", kv[0])):
        n = next(iter(by.values()))["n"]
        lines.append(f"| {cat} | {n} | " + " | ".join(f"{by[s]['success']:.2f} / {by[s]['score']:.1f}" for s in names) + " |")
    best_single = max(summary["by_category"]["all"][s]["score"] for s in names)
    lines += ["", f"per-goal oracle over the teachers: score {summary['oracle_score']:.1f} (best single strategy "
              f"{best_single:.1f}: the ratio {summary['oracle_score'] / best_single:.3f})", "goals won by (ties listed):"]
    patterns = list(summary["best_per_goal"].items())
    lines += [f"  {c:5d}  {w}" for w, c in patterns[:8]] + ([f"  ({len(patterns) - 8} more patterns)"] if len(patterns) > 8 else [])
    return "\n".join(lines)


def main() -> None:
    from pipeline.config import load_config
    from talentrl_core.stages import family_for

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=600, help="training goals (sampled with --seed; 0: all)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, help="write every episode and the summary here")
    ap.add_argument("overrides", nargs="*", help="config overrides after experiment=webshop (e.g. artifacts_dir=...)")
    args = ap.parse_args()
    cfg = load_config(["experiment=webshop", *args.overrides])
    family = family_for(cfg)
    tasks = family.tasks("train", n=args.n, seed=args.seed)
    register_variants()
    names = REGISTERED[:2] + list(VARIANTS) + REGISTERED[2:]
    env, rows, t0 = family.make(), [], time.perf_counter()
    for task in tasks:
        for name in names:
            rows.append({"goal": task.key, "category": task.task_type, "strategy": name,
                         **play(env, task, name, cfg.env.max_steps)})
    summary = summarise(rows, names)
    print(f"{len(tasks)} training goals × {len(names)} strategies in {time.perf_counter() - t0:.1f} s "
          f"(env.webshop_search={cfg.env.webshop_search}, {cfg.env.max_steps} steps); success / score:")
    print(report(summary, names))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "episodes": rows}, indent=1))


if __name__ == "__main__":
    with named_errors("bench_strategies_webshop"):
        main()
