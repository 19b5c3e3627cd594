"""Env throughput: the rollout loop with its envs in worker processes (``env.workers``) vs in this process.

Plays the same episodes (random admissible actions, seeded) both ways in one run and prints env steps/s, the ratio,
whether the episodes are identical, and a projection to more workers (Amdahl, from the measured parts: the loop's own
time stays serial, env time divides by the workers, the pool's measured IPC overhead is kept). Never asserts timing.

    .venv/bin/python bench/bench_env_pool.py [--games 12] [--max-steps 20] [--workers 2] [--batch 8] [--envs alfworld,textworld]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from talentrl_core.config import EnvConfig  # noqa: E402
from talentrl_core.env_pool import EnvPool  # noqa: E402
from talentrl_core.envs import make_family  # noqa: E402
from talentrl_core.policies import RandomPolicy  # noqa: E402
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes  # noqa: E402


class _Timed:
    """An in-process env that adds the seconds spent in it to ``clock[0]`` (the env share of the loop's time)."""

    def __init__(self, inner, clock):
        self.inner, self.clock, self.name = inner, clock, inner.name

    def __getattr__(self, item):
        fn = getattr(self.inner, item)
        if not callable(fn):
            return fn

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.clock[0] += time.perf_counter() - t0
        return timed


def _play(make_env, tasks, settings, batch):
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(tasks)]
    t0 = time.perf_counter()
    trajs = run_episodes(make_env, specs, RandomPolicy(0), settings, batch_size=batch, progress=False)
    return trajs, time.perf_counter() - t0


def _view(trajs):
    return [([(s.action, s.observation, s.reward) for s in t.steps], t.success, t.error) for t in trajs]


def measure(family, tasks, args) -> dict:
    settings = RolloutSettings(max_steps=args.max_steps, obs_chars=300, step_timeout_s=120)
    warm = family.make()  # the family's lazy imports and first load, out of the timed runs (the pool warms too)
    warm.reset(tasks[0])
    warm.close()
    clock = [0.0]
    local, t1 = _play(lambda: _Timed(family.make(), clock), tasks, settings, args.batch)
    t0 = time.perf_counter()
    with EnvPool(family.make, args.workers, settings.step_timeout_s) as pool:  # what env.workers does inside run_episodes
        pool.warm(tasks[0])
        start_s = time.perf_counter() - t0
        pooled, t2 = _play(pool.make, tasks, settings, args.batch)
    cold, t2_cold = _play(family.make, tasks, dataclasses.replace(settings, env_workers=args.workers), args.batch)
    steps = sum(t.n_steps for t in local)
    env_s, serial_s = clock[0], t1 - clock[0]
    overhead = max(0.0, t2 - serial_s - env_s / args.workers)
    return {"steps": steps, "episodes": len(local), "t1": t1, "t2": t2, "env_s": env_s, "serial_s": serial_s,
            "overhead_s": overhead, "identical": _view(local) == _view(pooled) == _view(cold), "start_s": start_s,
            "t2_cold": t2_cold,
            "errors": sum(bool(t.error) for t in pooled + cold), "wins": sum(t.success for t in local)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--games", type=int, default=12)
    ap.add_argument("--max-steps", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--envs", default="alfworld")
    ap.add_argument("--expert", default="handcoded", help="ALFWorld env.expert (handcoded computes its plan every step)")
    ap.add_argument("--data-dir", default=os.environ.get("TALENTRL_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    ap.add_argument("--cache", default=str(ROOT / "artifacts" / "cache"))
    args = ap.parse_args()
    rows = []
    for env in args.envs.split(","):
        cfg = EnvConfig(name=env, challenge_settings="level=5", eval_seeds=[100001, 100000 + args.games],
                        alfworld_archive=f"{args.data_dir}/alfworld/json_2.1.1_all.tar.xz", expert=args.expert,
                        max_steps=args.max_steps)
        family = make_family(cfg, Path(args.cache))
        tasks = family.tasks("eval" if env == "textworld" else "valid_seen", args.games, 0)
        family.prepare(tasks, workers=2, progress=False)
        rows.append((env, measure(family, tasks, args)))
    print(f"\nenv pool vs in-process ({args.games} episodes, random admissible actions, {args.max_steps} steps max, "
          f"batch {args.batch}, {args.workers} workers, {os.cpu_count()} CPUs)")
    for env, r in rows:
        sp = r["t1"] / r["t2"]
        print(f"{env}: {r['steps']} env steps, {r['episodes']} episodes ({r['wins']} won), identical episodes: {r['identical']}, "
              f"pool errors: {r['errors']}")
        print(f"  in-process   {r['t1']:7.1f} s  {r['steps'] / r['t1']:7.1f} env steps/s   (env calls {r['env_s']:.1f} s, "
              f"loop {r['serial_s']:.1f} s)")
        print(f"  pool x{args.workers}      {r['t2']:7.1f} s  {r['steps'] / r['t2']:7.1f} env steps/s   (warm pool; start-up "
              f"{r['start_s']:.1f} s before it)")
        print(f"  pool x{args.workers} cold {r['t2_cold']:7.1f} s  {r['steps'] / r['t2_cold']:7.1f} env steps/s   "
              f"(env.workers={args.workers} in run_episodes: includes start-up)")
        print(f"  speed-up     {sp:.2f}x at {args.workers} workers (ideal for this loop/env split: "
              f"{r['t1'] / (r['serial_s'] + r['env_s'] / args.workers):.2f}x; measured IPC overhead {r['overhead_s']:.1f} s)")
        proj = "  ".join(f"{n}: {r['t1'] / (r['serial_s'] + r['env_s'] / n + r['overhead_s']):.2f}x" for n in (2, 4, 8, 16))
        print(f"  projected (one core per worker): {proj}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
