"""The SFT learning curve: every saved SFT checkpoint (``<sft>.work/checkpoint-<step>``) played greedily on a
held-out panel, as talent_sft and flat_skillbank (``talentrl_core.evaluation.curve``).

    .venv/bin/python -m pipeline.curve experiment=webshop --panel webshop_dev --out docs/results/webshop/curve
    .venv/bin/python -m pipeline.curve experiment=alfworld --panel alfworld_valid_train --steps 250,500 --out <folder>

Writes ``episodes.jsonl`` (one row per step × system × task) and ``metrics.json`` (success with its Wilson 95%
interval and score with its bootstrap 95% interval per step) into ``--out``. Use a held-out split, never the test
panel: the curve sizes the run. Run it again into the same ``--out`` while SFT goes on: points whose checkpoint is
unchanged are kept from the ``episodes.jsonl`` there, only new checkpoints are played; a point stopped midway keeps
its finished chunks of 64 tasks (``<artifacts_dir>/curve.work``; a point's chunks are removed once the curve that
holds it is written, so two calls for other steps can run side by side on the same artifacts). With DAgger
rounds (``sft.dagger_rounds``) the curve runs on across them: behaviour cloning's steps, then each round's checkpoint
at the steps before it plus its own (``experiment=alfworld_prompt_loss``: BC's 1,000, then the round's checkpoints
up to 1,511, its routing warm-up's length included, which varies by run).
"""

from __future__ import annotations

import sys
from typing import Sequence

from pipeline.errors import named_errors


@named_errors("pipeline.curve")
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.diagnostic_cli import run_diagnostic
    from talentrl_core.evaluation.curve import CURVE_SYSTEMS

    def add_args(p):
        p.add_argument("--panel", required=True, help="a held-out panel, e.g. webshop_dev")
        p.add_argument("--systems", default=",".join(CURVE_SYSTEMS), help="comma-separated SFT systems")
        p.add_argument("--steps", type=steps_arg, default=None,
                       help="comma-separated checkpoint steps to play (default: every saved one); kept points of others stay")

    return run_diagnostic("python -m pipeline.curve", __doc__, add_args, curve, argv, after=drop_written_points)


def point_chunks(cfg):
    """Where the finished chunks of a curve point wait until the curve is written: ``<artifacts_dir>/curve.work``."""
    from talentrl_core.evaluation.resume import ChunkCache
    from talentrl_core.paths import ArtifactPaths

    return ChunkCache(ArtifactPaths.of(cfg).root / "curve")


def drop_written_points(cfg, args, rows) -> None:
    """Once ``--out`` holds the curve's ``rows``, remove the kept chunks of its points, and only those: a second
    curve call on the same artifacts (other steps, into another ``--out``) keeps the chunks it has not written yet."""
    cache = point_chunks(cfg)
    for panel, name in sorted({(r["panel"], f"{r['system']}-step{r['step']}") for r in rows}):
        cache.drop(panel, name)


def curve(cfg, args):
    from talentrl_core.agent import load_policy
    from talentrl_core.evaluation.curve import learning_curve
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.paths import ArtifactPaths
    from talentrl_core.stages import pinned_library

    lib = pinned_library(cfg, ArtifactPaths.of(cfg).sft_checkpoint)
    return learning_curve(cfg, args.panel, lambda flat: open_knowledge(lib, flat=flat),
                          lambda ckpt: load_policy(cfg, ckpt, temperature=0.0, name="curve")[0],
                          systems=[s for s in args.systems.split(",") if s], progress=True,
                          done=earlier_rows(args.out / "episodes.jsonl"), steps=args.steps, cache=point_chunks(cfg))


def steps_arg(text: str) -> list[int]:
    """``--steps 250,500`` as [250, 500]; anything else is named.

    >>> steps_arg("250, 500")
    [250, 500]
    """
    import argparse

    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps wants comma-separated checkpoint steps, e.g. 250,500; got {text!r}") from None


def earlier_rows(path) -> list[dict]:
    """The rows an earlier call wrote into ``--out`` (none when there is no file); a damaged line is named."""
    from talentrl_core.io import iter_jsonl

    return [row for _, row in iter_jsonl(path)] if path.exists() else []

if __name__ == "__main__":
    sys.exit(main())
