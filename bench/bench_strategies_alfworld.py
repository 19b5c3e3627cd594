"""ALFWorld's strategy experts on real games: success and steps per strategy × task type / object class / place.

Plays every registered ALFWorld strategy (``talentrl_core/envs/alfworld/strategies.py``) on the same games of a
split, each episode to a win or ``--max-steps`` steps (default: ``max_steps`` of ``conf/env/alfworld.yaml``), and
prints the success (wins/games, mean steps of the wins) of each strategy per

* task type;
* object class (the goal's object);
* where the goal's objects start: on open receptacles only, in closed ones only, or both (read from the game's
  PDDL problem by this script; the strategies never see it);
* task type × object class (in the JSON only, ``by_type_object``).

A strategy is deterministic and a step budget only cuts an episode short, so the success under a smaller budget
``b`` is read off the same episodes: a win in at most ``b`` steps. ``--budgets 30`` adds those tables.

    nice -n 19 .venv/bin/python bench/bench_strategies_alfworld.py --n 20                      # quick
    nice -n 19 .venv/bin/python bench/bench_strategies_alfworld.py --budgets 30 --json matrix.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from talentrl_core.config import EnvConfig, EnvName  # noqa: E402
from talentrl_core.envs.alfworld import SPLIT_SIZES, TASK_TYPES, AlfworldEnv, AlfworldFamily  # noqa: E402
from talentrl_core.envs.alfworld.strategies import CLOSED_CLASSES  # noqa: E402
from talentrl_core.envs.base import Task  # noqa: E402
from talentrl_core.envs.strategies import play as play_strategy, strategies  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_IN_RECEPTACLE = re.compile(r"\(inReceptacle (\S+) (\S+)\)")


def conf_max_steps() -> int:
    """``max_steps`` of the env config the pipeline uses for ALFWorld."""
    return int(yaml.safe_load((ROOT / "conf" / "env" / "alfworld.yaml").read_text())["max_steps"])


def _pddl_class(name: str) -> str:
    """``Sink_bar_..._bar_SinkBasin`` → ``sinkbasin``; ``Drawer_bar__minus_01...`` → ``drawer``."""
    parts = name.split("_bar_")
    return (parts[-1] if len(parts) > 1 and parts[-1].isalpha() else parts[0]).lower()


def start_places(root: Path, task: Task) -> list[str]:
    """The receptacle classes where objects of the goal's class start (the game's PDDL problem, sorted)."""
    problem = json.loads((root / task.key).read_text())["pddl_problem"]
    obj = task.payload["object_target"].lower()
    return sorted({_pddl_class(r) for o, r in _IN_RECEPTACLE.findall(problem) if _pddl_class(o) == obj})


def place_group(places: list[str]) -> str:
    """``open``, ``closed`` or ``both``: whether the objects start on open or in closed receptacles."""
    closed = {p in CLOSED_CLASSES for p in places}
    return "both" if len(closed) > 1 else "closed" if closed == {True} else "open" if closed else "?"


def play(env: AlfworldEnv, task: Task, strategy: str) -> dict[str, Any]:
    """One episode of ``strategy`` on ``task``: outcome, steps, and the class of receptacle it first took from."""
    ep = play_strategy(env, task, strategy)
    took = next((a.split(" from ", 1)[1] for a in ep.actions if a.startswith("take ") and " from " in a), "")
    return {"won": ep.won, "steps": len(ep.actions), "gave_up": ep.gave_up,
            "took_from": took.rsplit(" ", 1)[0] if took else "", "actions": ep.actions}


def run(family: AlfworldFamily, tasks: list[Task], names: list[str], log: Callable[[str], None]) -> list[dict]:
    """Every strategy on every task, game by game (one load per game); one row per (game, strategy)."""
    env = family.make()
    rows, t0 = [], time.perf_counter()
    try:
        for i, task in enumerate(tasks):
            places = start_places(family.root, task)
            for name in names:
                r = play(env, task, name)
                rows.append({"key": task.key, "task_type": task.task_type, "strategy": name,
                             "object": task.payload["object_target"].lower(), "places": places,
                             "where": place_group(places), **r})
            done = rows[-len(names):]
            log(f"[{i + 1}/{len(tasks)} {time.perf_counter() - t0:6.0f}s] {task.key.split('/')[1]}: "
                + ", ".join(f"{r['strategy']} {'won' if r['won'] else 'lost'} {r['steps']}" for r in done))
    finally:
        env.close()
    return rows


def matrix(rows: list[dict], cell_of: Callable[[dict], str], budget: int) -> dict[str, dict[str, dict]]:
    """strategy → cell → wins, games, success and mean steps of the wins, a win counting when within ``budget``."""
    acc: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for r in rows:
        c = acc[r["strategy"]][cell_of(r)]
        win = r["won"] and r["steps"] <= budget
        c[0] += int(win)
        c[1] += 1
        c[2] += r["steps"] if win else 0
    return {s: {cell: {"wins": w, "games": n, "success": w / n, "mean_steps": (st / w if w else None)}
                for cell, (w, n, st) in sorted(cells.items())} for s, cells in acc.items()}


def table(title: str, m: dict[str, dict[str, dict]], names: list[str]) -> str:
    """The matrix as a Markdown table: one row per cell, one column per strategy; a cell is wins/episodes (mean
    steps of the wins)."""
    cells = sorted({c for s in names for c in m.get(s, {})})
    lines = [f"**{title}**", "", "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for c in cells:
        out = []
        for s in names:
            v = m.get(s, {}).get(c)
            steps = f" ({v['mean_steps']:.1f})" if v and v["mean_steps"] is not None else ""
            out.append(f"{v['wins']}/{v['games']}{steps}" if v else "-")
        lines.append(f"| {c} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def agreement(rows: list[dict], budget: int) -> dict[str, Any]:
    """Game by game under ``budget``: the success of an oracle that picks the best strategy per game, and the games
    where the strategies' outcomes (won / lost) differ, or their outcomes or steps."""
    games: dict[str, dict[str, Any]] = defaultdict(dict)
    for r in rows:
        games[r["key"]][r["strategy"]] = r["steps"] if r["won"] and r["steps"] <= budget else None
    per_game = list(games.values())
    return {
        "oracle_success": sum(any(v is not None for v in g.values()) for g in per_game) / max(len(per_game), 1),
        "games_outcomes_differ": sum(len({v is None for v in g.values()}) > 1 for g in per_game),
        "games_steps_differ": sum(len(set(g.values())) > 1 for g in per_game),
    }


def summarise(rows: list[dict], budgets: list[int]) -> dict[str, Any]:
    """The matrices and the game-by-game agreement per budget."""
    views = {
        "overall": lambda r: "all",
        "by_task_type": lambda r: r["task_type"],
        "by_object": lambda r: r["object"],
        "by_where": lambda r: r["where"],
        "by_took_from": lambda r: r["took_from"] or "(nothing taken)",
        "by_type_object": lambda r: f"{r['task_type']}/{r['object']}",
    }
    return {"budgets": {str(b): {**{view: matrix(rows, f, b) for view, f in views.items()}, **agreement(rows, b)}
                        for b in budgets}}


def report(summary: dict[str, Any], names: list[str], n_games: int) -> str:
    """The printed tables, one block per budget."""
    titles = {"overall": "all games", "by_task_type": "task type", "by_object": "object class",
              "by_where": "where the goal's objects start (open / closed receptacles / both)",
              "by_took_from": "class of the receptacle the strategy took the object from (its own episodes)"}
    blocks = []
    for b, s in summary["budgets"].items():
        blocks.append(f"### budget {b} steps ({n_games} games; wins/episodes, mean steps of the wins in brackets)")
        blocks.extend(table(t, s[v], names) for v, t in titles.items())
        blocks.append(f"oracle over the strategies: {100 * s['oracle_success']:.0f}%; games where the outcomes differ: "
                      f"{s['games_outcomes_differ']}; where outcome or steps differ: {s['games_steps_differ']}")
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="valid_seen", choices=list(SPLIT_SIZES))
    ap.add_argument("--types", default=",".join(TASK_TYPES), help="task types to play, comma-separated (default all)")
    ap.add_argument("--n", type=int, default=0, help="a seeded subset of this many games of those types (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0,
                    help="step budget (default: max_steps of conf/env/alfworld.yaml)")
    ap.add_argument("--budgets", default="", help="smaller budgets to read off the same episodes, e.g. 30,20")
    ap.add_argument("--archive", default=str(Path(os.environ.get("TALENTRL_DATA_DIR", ROOT.parent / "shared" / "data"))
                                             / "alfworld" / "json_2.1.1_all.tar.xz"))
    ap.add_argument("--cache-dir", default=str(ROOT / "artifacts" / "cache"))
    ap.add_argument("--json", default="", help="write the matrices and every episode here")
    a = ap.parse_args(argv)
    types = [t for t in a.types.split(",") if t]
    if unknown := sorted(set(types) - set(TASK_TYPES)):
        ap.error(f"unknown task types {unknown}; choose from {list(TASK_TYPES)}")
    max_steps = a.max_steps or conf_max_steps()
    budgets = sorted({max_steps, *(int(b) for b in a.budgets.split(",") if b)}, reverse=True)
    if budgets[0] > max_steps or budgets[-1] < 1:
        ap.error(f"--budgets must lie in 1..{max_steps} (the --max-steps the episodes are played under)")
    names = [s.name for s in strategies("alfworld")]
    if not names:
        ap.error("no ALFWorld strategies are registered")
    cfg = EnvConfig(name=EnvName.alfworld, alfworld_archive=a.archive, max_steps=max_steps)
    family = AlfworldFamily(cfg, a.cache_dir)
    tasks = [t for t in family.tasks(a.split) if t.task_type in types]
    if 0 < a.n < len(tasks):
        import random

        tasks = [tasks[i] for i in sorted(random.Random(a.seed).sample(range(len(tasks)), a.n))]
    t0 = time.perf_counter()
    rows = run(family, tasks, names, lambda line: print(line, file=sys.stderr, flush=True))
    summary = summarise(rows, budgets)
    print(report(summary, names, len(tasks)))
    if a.json:
        from talentrl_core.io import write_json

        write_json(a.json, {"split": a.split, "types": types, "n": a.n, "seed": a.seed, "max_steps": max_steps,
                            "strategies": {s.name: s.description for s in strategies("alfworld")},
                            "games": len(tasks), "wall_s": time.perf_counter() - t0, **summary, "episodes": rows})
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_strategies_alfworld")(main)())
