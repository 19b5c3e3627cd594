"""The single stage entry point: ``python -m pipeline.run <stage> [hydra overrides...]``.

DVC stages, the Dagster assets (through ``talentrl_core.stages``) and users all run a stage this way:

    python -m pipeline.run collect experiment=demo collect.n_episodes=8

Prints the stage's metadata as JSON on stdout. Exit codes: 0 done; 2 the config does not compose
(``config error: ...`` names the key and the choices) or a bad command line; 3 the stage is not built
yet. Any other failure propagates with its traceback (exit 1). Offline by default: HF_HUB_OFFLINE,
TRANSFORMERS_OFFLINE and WANDB_MODE=offline are set unless the environment already sets them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Sequence

from .env import offline_defaults


def _stage_table() -> str:
    from talentrl_core.stages import BUILT, STAGES

    doc = {
        "collect": "roll out a policy on training tasks -> artifacts/trajectories",
        "distill": "trajectories -> skills and talents (LanceDB) -> artifacts/library",
        "sft": "talent-aware SFT -> artifacts/models/sft",
        "rl": "routing + execution RL from the SFT checkpoint -> artifacts/models/rl",
        "evaluate": "fixed panels, baselines, report -> artifacts/eval",
    }
    rows = [f"  {s:<9} {'built' if s in BUILT else 'not built yet':<14} {doc.get(s, '')}" for s in STAGES]
    return "stages:\n" + "\n".join(rows)


def parser() -> argparse.ArgumentParser:
    from talentrl_core.stages import STAGES

    p = argparse.ArgumentParser(
        prog="python -m pipeline.run",
        description="Run one TalentRL pipeline stage with Hydra overrides of conf/.",
        epilog=_stage_table() + "\n\nexample: python -m pipeline.run collect experiment=demo collect.n_episodes=8",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("stage", choices=list(STAGES), metavar="stage", help="one of: " + ", ".join(STAGES))
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=demo sft.max_steps=50")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    offline_defaults()
    args = parser().parse_args(argv)

    from talentrl_core.stages import STAGES, CollectFailed, StageNotBuilt

    from .config import ConfigError, load_config

    try:
        cfg = load_config(args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    try:
        with stdout_to_stderr():
            meta = STAGES[args.stage](cfg)
    except StageNotBuilt:
        print(f"stage {args.stage} is not built yet", file=sys.stderr)
        return 3
    except (CollectFailed, FileNotFoundError, OSError, ValueError) as e:  # named failures: one clear line, exit 1
        if os.environ.get("TALENTRL_TRACEBACK"):
            raise
        print(f"{args.stage}: error: {e}\n(set TALENTRL_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return 1
    print(json.dumps(meta, indent=2, sort_keys=True, default=str))
    return 0


@contextlib.contextmanager
def stdout_to_stderr():
    """While a stage runs, everything written to stdout (libraries' prints, worker processes) goes to stderr, so
    stdout carries the stage's JSON alone (``python -m pipeline.run ... | jq``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    sys.exit(main())
