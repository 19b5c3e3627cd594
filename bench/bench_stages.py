"""Per-stage throughput of the demo's hot paths: the pre-optimisation way vs today's, side by side in one run.

Each row runs the same work twice in this process and prints both rates and their ratio (today / before):

* ``games``   TextWorld treasure_hunter level 15 generation + Inform7 compile. Before: a fresh Inform7 HOME and a
              re-parsed knowledge base per game. Today: one scratch HOME and one parsed knowledge base per process.
* ``sft``     TRL SFT steps on real expert samples (the demo's prompt format, 16 per batch). Before: float32, one
              padded pass per random batch, TRL's fused LM head over every position. Today: bf16 autocast (where the
              CPU has it), each random batch in length-sorted micro-batches of 4, the LM head on labelled positions.
* ``rollout`` greedy constrained play of the same games with the same model (what evaluation and RL rollouts do).
              Before: float32, whole prompt every turn, one forward per generated token. Today: bf16 autocast,
              prefix KV reuse across an episode's turns, trie-forced tokens without a forward.

The model is the demo's Qwen2 (256 x 8, ffn 768) with a tokenizer trained offline; weights are a short SFT so
rollouts behave like a trained policy's. Nothing is downloaded.

    .venv/bin/python bench/bench_stages.py                      # ~4 min on 2 cores
    .venv/bin/python bench/bench_stages.py --games 4 --sft-steps 6 --episodes 16
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def bench_games(n: int, work: Path) -> dict:
    from talentrl_core.envs.textworld import games as tw

    def run(tag: str, seeds: range) -> float:
        t0 = time.perf_counter()
        for s in seeds:
            tw.generate_game(work / f"games-{tag}", tw.GameSpec("tw-treasure_hunter", "level=15", s))
        return n / (time.perf_counter() - t0)

    tw.generate_game(work / "games-warm", tw.GameSpec("tw-treasure_hunter", "level=15", 999))  # imports, first parse
    today = run("today", range(1, 1 + n))
    orig_home, orig_kb = tw._scratch_home, tw._memoised_knowledge_base
    tw._scratch_home = lambda: Path(tempfile.mkdtemp(prefix="bench-home-"))  # a fresh HOME per game, as before
    tw._memoised_knowledge_base = contextlib.nullcontext  # re-parse the knowledge base every game, as before
    try:
        before = run("before", range(101, 101 + n))
    finally:
        tw._scratch_home, tw._memoised_knowledge_base = orig_home, orig_kb
    return {"unit": "games/s", "before": before, "today": today}


def sft_setup(args, work: Path):
    """A demo-size base model and SFT data from expert play on a few coin-collector and treasure games."""
    from bench_rl import BANK

    from talentrl_core.config import EnvConfig, ModelConfig, SFTConfig
    from talentrl_core.envs.textworld.family import TextWorldFamily
    from talentrl_core.models import build_tiny
    from talentrl_core.rl.static_knowledge import StaticKnowledge
    from talentrl_core.policies import ExpertPolicy
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes
    from talentrl_core.sft import build_sft_data

    env = EnvConfig(challenges=["tw-coin_collector", "tw-treasure_hunter:level=15"], challenge_settings="level=5",
                    train_seeds=[1, args.train_games], max_steps=10, history=1, obs_chars=300, cache_dir=str(work / "cache"))
    family = TextWorldFamily(env, work / "cache")
    tasks = family.tasks("train")
    family.prepare(tasks, workers=2, progress=False)
    trajs = run_episodes(family.make, [EpisodeSpec(t) for t in tasks], ExpertPolicy(),
                         RolloutSettings(max_steps=10, history=1, obs_chars=300), None, 16, False)
    knowledge = StaticKnowledge.from_dict(BANK)
    for t in trajs:  # the bank's talents by task family, as distillation would label them
        t.talent_id = "T1" if t.task_type == "tw-coin_collector" else "T2"
    scfg = SFTConfig(max_steps=args.sft_steps, batch_size=16, lr=2e-3, warmup_steps=2, save_steps=10_000, resume=False,
                     min_skill_share=0.0, max_duplicate_share=1.0)
    data = build_sft_data(trajs, knowledge, scfg, 1, 300)
    mcfg = ModelConfig(hidden_size=args.hidden, num_hidden_layers=args.layers, intermediate_size=args.ffn, device="cpu")
    corpus = sorted({t.goal for t in trajs} | {s.observation for t in trajs for s in t.steps})
    base = build_tiny(mcfg, work / "base", args.data_dir, extra_texts=corpus)
    return family, tasks, knowledge, data, scfg, mcfg, base


def bench_sft(data, scfg, mcfg, base: Path, work: Path) -> dict:
    import talentrl_core.sft as sft

    def run(tag: str, compute: str, micro: int) -> float:
        out = work / f"sft-{tag}"
        info = sft.train_sft(data, str(base), out, dataclasses.replace(scfg, micro_batch_size=micro),
                             dataclasses.replace(mcfg, compute_dtype=compute))
        return info["steps"] / info["seconds"]

    today = run("today", "auto", 4)
    orig = sft.labelled_positions_trainer
    sft.labelled_positions_trainer = lambda base_cls, *_: base_cls  # TRL's own loss (fused LM head at every position)
    try:
        before = run("before", "float32", 16)
    finally:
        sft.labelled_positions_trainer = orig
    return {"unit": "steps/s", "before": before, "today": today, "checkpoint": str(work / "sft-today")}


def bench_rollout(family, tasks, knowledge, checkpoint: str, n: int) -> dict:
    import torch

    from talentrl_core.generation import TransformersGenerator
    from talentrl_core.models import load_model
    from talentrl_core.precision import resolve_compute_dtype
    from talentrl_core.policies import LLMPolicy
    from talentrl_core.rollout import EpisodeSpec, RolloutSettings, run_episodes

    model, tok = load_model(checkpoint)
    model.eval()
    settings = RolloutSettings(max_steps=10, history=1, obs_chars=300)
    specs = [EpisodeSpec(t, routing="policy", seed=i) for i, t in enumerate((tasks * n)[:n])]

    def run(gen: TransformersGenerator) -> tuple[float, float]:
        policy = LLMPolicy(gen, tok, max_new_tokens=32, temperature=0.0, constrained=True)
        t0 = time.perf_counter()
        trajs = run_episodes(family.make, specs, policy, settings, knowledge, 16, False)
        steps = sum(len(t.steps) for t in trajs)
        return steps / (time.perf_counter() - t0), gen.stats["prefilled_tokens"] / max(steps, 1)

    today, tok_today = run(TransformersGenerator(model, tok, compute_dtype=resolve_compute_dtype("auto")))
    before, tok_before = run(TransformersGenerator(model, tok, compute_dtype=torch.float32, reuse_kv=False, skip_forced=False))
    return {"unit": "policy steps/s", "before": before, "today": today,
            "prefilled_tokens_per_step": {"before": round(tok_before, 1), "today": round(tok_today, 1)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--games", type=int, default=6, help="games generated per variant")
    p.add_argument("--train-games", type=int, default=8, help="games per challenge for the SFT data")
    p.add_argument("--sft-steps", type=int, default=12)
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256, help="model width (the demo's 256)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--data-dir", default=os.environ.get("TALENTRL_DATA_DIR", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-stages-"))
    try:
        rows = {"games": bench_games(args.games, work)}
        family, tasks, knowledge, data, scfg, mcfg, base = sft_setup(args, work)
        rows["sft"] = bench_sft(data, scfg, mcfg, base, work)
        rows["rollout"] = bench_rollout(family, tasks, knowledge, rows["sft"].pop("checkpoint"), args.episodes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'stage':<10}{'unit':<16}{'before':>10}{'today':>10}{'today/before':>14}")
    for name, r in rows.items():
        r["ratio"] = r["today"] / r["before"]
        print(f"{name:<10}{r['unit']:<16}{r['before']:>10.3f}{r['today']:>10.3f}{r['ratio']:>13.2f}x")
    tok = rows["rollout"]["prefilled_tokens_per_step"]
    print(f"rollout prompt tokens read per policy step: before {tok['before']}, today {tok['today']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_stages")(main)())
