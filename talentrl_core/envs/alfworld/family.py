"""The ALFWorld family (tasks of the 4 splits, env instances) and the expert check (CLI)::

    python -m talentrl_core.envs.alfworld --check valid_seen --workers 2 --expert handcoded
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from ...config import EnvConfig, EnvName
from ..base import EnvFamily, Task
from .data import FAMILY, SPLIT_SIZES, TASK_TYPES, _read_index, _scan_games, ensure_unpacked, parse_game_key, resolve_archive
from .env import EXPERTS, AlfworldEnv

class AlfworldFamily(EnvFamily):
    """ALFWorld tasks (4 splits of real games) and env instances."""

    name = FAMILY

    def __init__(self, cfg: EnvConfig, cache_dir: str | os.PathLike) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        self.archive = resolve_archive(cfg.alfworld_archive)
        self._root: Optional[Path] = None
        self._index: Optional[dict[str, list[str]]] = None

    @property
    def root(self) -> Path:
        """The unpacked games root (unpacks on first use)."""
        if self._root is None:
            self._root = ensure_unpacked(self.archive, self.cache_dir)
            index = _read_index(self.cache_dir / FAMILY)
            self._index = index["splits"] if index else _scan_games(self._root)
        return self._root

    def splits(self) -> list[str]:
        return list(SPLIT_SIZES)

    def task_types(self) -> list[str]:
        return list(TASK_TYPES)

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        if split not in SPLIT_SIZES:
            raise ValueError(f"ALFWorld split {split!r}: choose one of {list(SPLIT_SIZES)}")
        if n < 0:
            raise ValueError(f"n={n}: use 0 for the whole split or a positive subset size")
        self.root  # noqa: B018 - unpack / read the index
        keys = self._index[split]
        if 0 < n < len(keys):
            keys = [keys[i] for i in sorted(random.Random(seed).sample(range(len(keys)), n))]
        out = []
        for key in keys:
            p = parse_game_key(key)
            payload = {k: p[k] for k in ("object_target", "mrecep_target", "parent_target", "toggle_target", "scene")}
            out.append(Task(FAMILY, split, p["task_type"], key, payload))
        return out

    def make(self) -> AlfworldEnv:
        return AlfworldEnv(self.root, expert=self.cfg.expert, max_steps=self.cfg.max_steps)


# --------------------------------------------------------------------------------------------------
# Expert check (CLI)
# --------------------------------------------------------------------------------------------------


def play_expert(env: AlfworldEnv, task: Task) -> dict[str, Any]:
    """Play ``env``'s expert on ``task`` until done; timings and outcome."""
    t0 = time.perf_counter()
    env.reset(task)
    reset_s = time.perf_counter() - t0
    won, steps, step_s, error, actions = False, 0, 0.0, None, []
    while True:
        action = env.expert_action()
        if action is None:
            error = env.expert_error or "expert returned no action"
            break
        t1 = time.perf_counter()
        res = env.step(action)
        step_s += time.perf_counter() - t1
        steps += 1
        actions.append(action)
        if res.done:
            won = res.won
            break
    return {
        "task_id": task.task_id,
        "key": task.key,
        "task_type": task.task_type,
        "won": won,
        "steps": steps,
        "reset_s": reset_s,
        "step_s": step_s / max(steps, 1),
        "error": error,
        "actions": actions,
    }


_WORKER: dict[str, Any] = {}


def _worker_init(root: str, expert: str, max_steps: int) -> None:
    _WORKER["env"] = AlfworldEnv(Path(root), expert=expert, max_steps=max_steps)


def _worker_play(task_json: str) -> dict[str, Any]:
    return play_expert(_WORKER["env"], Task.from_json(task_json))


def check_split(
    family: AlfworldFamily, split: str, workers: int = 2, n: int = 0, seed: int = 0
) -> dict[str, Any]:
    """Play the configured expert on every game of ``split`` (or a seeded subset of ``n``)."""
    import multiprocessing as mp

    tasks = family.tasks(split, n=n, seed=seed)
    args = (str(family.root), family.cfg.expert, family.cfg.max_steps)
    t0 = time.perf_counter()
    if workers <= 1:
        _worker_init(*args)
        try:
            results = [_worker_play(t.to_json()) for t in tasks]
        finally:
            _WORKER.pop("env").close()
    else:
        with mp.get_context("spawn").Pool(workers, initializer=_worker_init, initargs=args) as pool:
            results = list(pool.imap(_worker_play, [t.to_json() for t in tasks], chunksize=1))
    wall = time.perf_counter() - t0
    per_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        per_type[r["task_type"]][0] += int(r["won"])
        per_type[r["task_type"]][1] += 1
    wins = sum(int(r["won"]) for r in results)
    return {
        "split": split,
        "expert": family.cfg.expert,
        "max_steps": family.cfg.max_steps,
        "wins": wins,
        "total": len(results),
        "per_type": {t: per_type[t] for t in TASK_TYPES if t in per_type},
        "wall_s": wall,
        "mean_reset_s": sum(r["reset_s"] for r in results) / max(len(results), 1),
        "mean_step_s": sum(r["step_s"] * r["steps"] for r in results) / max(sum(r["steps"] for r in results), 1),
        "mean_steps_won": sum(r["steps"] for r in results if r["won"]) / max(wins, 1),
        "max_steps_won": max((r["steps"] for r in results if r["won"]), default=0),
        "failures": [r for r in results if not r["won"]],
        "games": [{k: r[k] for k in ("key", "task_type", "won", "steps", "reset_s", "step_s")} for r in results],
    }


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m talentrl_core.envs.alfworld", description=__doc__.split("\n")[0])
    ap.add_argument("--check", metavar="SPLIT", required=True, choices=list(SPLIT_SIZES), help="split to play")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2; at most one per core)")
    ap.add_argument("--expert", default="handcoded", choices=EXPERTS)
    ap.add_argument("--max-steps", type=int, default=50, help="step limit per game (default 50)")
    ap.add_argument("--n", type=int, default=0, help="play a seeded subset of this many games (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--archive",
        default=str(Path(os.environ.get("TALENTRL_DATA_DIR", "../shared/data")) / "alfworld" / "json_2.1.1_all.tar.xz"),
    )
    ap.add_argument("--cache-dir", default="artifacts/cache")
    ap.add_argument("--out", default="", help="write the full results (JSON) here")
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error("--workers must be >= 1")
    workers = min(a.workers, os.cpu_count() or 1)  # one PDDL-bound process per core at most

    cfg = EnvConfig(name=EnvName.alfworld, max_steps=a.max_steps, alfworld_archive=a.archive, expert=a.expert)
    fam = AlfworldFamily(cfg, a.cache_dir)
    res = check_split(fam, a.check, workers=workers, n=a.n, seed=a.seed)
    print(f"ALFWorld {res['split']}: expert={res['expert']} max_steps={res['max_steps']} workers={workers}")
    for t, (w, n) in res["per_type"].items():
        print(f"  {t:32s} {w:4d}/{n:<4d}")
    pct = 100.0 * res["wins"] / max(res["total"], 1)
    print(f"  {'overall':32s} {res['wins']:4d}/{res['total']:<4d} ({pct:.1f}%)")
    print(
        f"  wall {res['wall_s']:.1f} s; mean reset {res['mean_reset_s']:.2f} s; mean step {1000 * res['mean_step_s']:.0f} ms;"
        f" steps to win: mean {res['mean_steps_won']:.1f}, max {res['max_steps_won']}"
    )
    for f in res["failures"]:
        print(f"  FAIL {f['key']} steps={f['steps']} error={f['error']} last={f['actions'][-4:]}")
    if a.out:
        from ...io import write_json

        write_json(a.out, res)
    return 0 if res["wins"] == res["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
