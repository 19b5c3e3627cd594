"""Does the executor follow its talent? Each checkpoint's probability of every strategy's first command under every
talent, on training tasks where the strategies start differently (``talentrl_core.evaluation.talent_probe``): a
precondition of any routing study, read before a single rollout.

    .venv/bin/python -m pipeline.talent_probe experiment=ring artifacts_dir=runs/ring --out probe      # every saved SFT checkpoint
    .venv/bin/python -m pipeline.talent_probe experiment=ring --checkpoint artifacts/models/sft --out probe

Writes ``records.jsonl`` (one row per checkpoint × task × talent) and ``metrics.json`` (``follows``, ``against``,
``effect`` per checkpoint, overall and per task type) into ``--out``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pipeline.errors import named_errors


@named_errors("pipeline.talent_probe")
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.diagnostic_cli import run_diagnostic

    def add_args(p):
        p.add_argument("--checkpoint", action="append", default=[],
                       help="a checkpoint folder (repeatable); default: every saved SFT checkpoint, then the final one")
        p.add_argument("--per-type", type=int, default=40, help="tasks per task type (default 40)")

    return run_diagnostic("python -m pipeline.talent_probe", __doc__, add_args, talent_probe, argv, rows_name="records.jsonl")


def talent_probe(cfg, args):
    from talentrl_core.evaluation.curve import curve_checkpoints
    from talentrl_core.evaluation.talent_probe import contrasting_tasks, probe, summary
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.models import load_model
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.stages import pinned_library, train_trajectories

    paths = ArtifactPaths.of(cfg)
    try:
        saved = curve_checkpoints(paths, cfg.sft.dagger_rounds)
    except ValueError:  # none kept (sft.keep_checkpoints) or none yet: the final checkpoint alone
        saved = []
    points = [(Path(c).name, Path(c)) for c in args.checkpoint] or [
        (f"step {s}", c) for s, c in saved] + [("final", paths.sft_checkpoint)]
    points = [(name, c) for name, c in points if (c / "config.json").exists()]
    if not points:
        raise ValueError(f"no checkpoint to probe: none given and no SFT checkpoint at "
                         f"{paths.sft_checkpoint} or under {paths.sft_checkpoint}.work: run the sft stage first")
    knowledge = open_knowledge(pinned_library(cfg, points[-1][1]))
    family = str(cfg.env.name)
    talent_of = knowledge.lib.strategy_talents(family)
    if len(talent_of) < 2:
        raise ValueError(f"the library holds {len(talent_of)} strategy talent(s) for {family}: a probe needs two or more "
                         "(collect.strategies, then distill)")
    tasks = contrasting_tasks([t for t in train_trajectories(cfg) if t.policy == "expert"], args.per_type)
    if not tasks:
        raise ValueError("no training task whose strategies start with different commands: nothing to probe")
    records, table = [], {}
    for name, ckpt in points:
        model, tok = load_model(ckpt, cfg.model)
        model.eval()
        rows = probe(model, tok, model.config.vocab_size, knowledge, tasks, talent_of, cfg.env.history,
                     cfg.env.obs_chars, cfg.env.memory_mode)
        records += [{"checkpoint": name, **r} for r in rows]
        table[name] = summary(rows)
        print(f"{name}: {table[name]['follows']} / {table[name]['against']} (effect {table[name]['effect']})", flush=True)
    return records, {"n_tasks": len(tasks), "talents": talent_of, "checkpoints": table}


if __name__ == "__main__":
    sys.exit(main())
