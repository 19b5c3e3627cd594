"""Batched rollout loop vs the same episodes one at a time (tiny model, TextWorld and ALFWorld).

Prints env-steps/s and generated tokens/s for both modes and the ratio (batched / sequential), in one run.
The model is a randomly initialised tiny Qwen2 with constrained decoding (so every action is admissible
and episodes run to the step limit: the same work in both modes).

    .venv/bin/python bench/bench_rollout.py [--episodes 16] [--batch 16] [--max-steps 8] [--envs textworld,alfworld]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from talentrl_core.config import EnvConfig, ModelConfig  # noqa: E402
from talentrl_core.envs import make_family  # noqa: E402
from talentrl_core.generation import TransformersGenerator  # noqa: E402
from talentrl_core.models import build_tiny, load_model  # noqa: E402
from talentrl_core.policies import LLMPolicy  # noqa: E402
from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes  # noqa: E402


def measure(family, tasks, policy, batch: int, max_steps: int) -> dict:
    specs = [EpisodeSpec(t, seed=i) for i, t in enumerate(tasks)]
    t0 = time.perf_counter()
    trajs = run_episodes(family.make, specs, policy, RolloutSettings(max_steps=max_steps, obs_chars=300), batch_size=batch, progress=False)
    dt = time.perf_counter() - t0
    steps = sum(t.n_steps for t in trajs)
    toks = sum(s.completion_tokens for t in trajs for s in t.steps)
    return {"seconds": dt, "env_steps_per_s": steps / dt, "gen_tokens_per_s": toks / dt, "steps": steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-steps", type=int, default=8)
    ap.add_argument("--envs", default="textworld,alfworld")
    ap.add_argument("--data-dir", default=os.environ.get("TALENTRL_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    ap.add_argument("--cache", default=str(ROOT / "artifacts" / "cache"))
    args = ap.parse_args()
    os.environ.setdefault("HOME", tempfile.mkdtemp())
    with tempfile.TemporaryDirectory() as tmp:
        mcfg = ModelConfig(device="cpu")
        model, tok = load_model(build_tiny(mcfg, Path(tmp) / "tiny", args.data_dir))
        policy = LLMPolicy(TransformersGenerator(model, tok), tok, max_new_tokens=24, temperature=1.0, constrained=True)
        rows = []
        for env in args.envs.split(","):
            cfg = EnvConfig(name=env, challenge_settings="level=5", eval_seeds=[100001, 100000 + args.episodes],
                            alfworld_archive=f"{args.data_dir}/alfworld/json_2.1.1_all.tar.xz")
            family = make_family(cfg, Path(args.cache))
            split = "eval" if env == "textworld" else "valid_seen"
            tasks = family.tasks(split, args.episodes, 0)
            family.prepare(tasks, workers=2, progress=False)
            seq = measure(family, tasks, policy, 1, args.max_steps)
            bat = measure(family, tasks, policy, args.batch, args.max_steps)
            rows.append((env, seq, bat))
    print(f"\nbatched rollout vs one-at-a-time ({args.episodes} episodes, {args.max_steps} steps max, batch {args.batch})")
    print(f"{'env':<10} {'mode':<11} {'seconds':>8} {'env-steps/s':>12} {'gen tok/s':>10}")
    for env, seq, bat in rows:
        for name, r in (("sequential", seq), ("batched", bat)):
            print(f"{env:<10} {name:<11} {r['seconds']:>8.1f} {r['env_steps_per_s']:>12.1f} {r['gen_tokens_per_s']:>10.1f}")
        print(f"{env:<10} {'ratio':<11} {'':>8} {bat['env_steps_per_s'] / seq['env_steps_per_s']:>11.2f}x "
              f"{bat['gen_tokens_per_s'] / seq['gen_tokens_per_s']:>9.2f}x")
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_rollout")(main)())
