"""Per-decision accuracy against the teacher (``talentrl_core.evaluation.decisions``): the teacher plays every step
of a panel's tasks and the checkpoint, shown the same prompt with the teacher's talent, names its command first.

    .venv/bin/python -m pipeline.decisions experiment=webshop --checkpoint artifacts/models/sft --teacher rank_order \\
        --panel webshop --out docs/results/webshop/decisions

Writes ``records.jsonl`` (one row per decision: teacher's command, the policy's, its class, correct) and
``metrics.json`` (accuracy per decision class and overall) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from pipeline.errors import named_errors


@named_errors("pipeline.decisions")
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.config import ConfigError, load_config, refuse
    from talentrl_core.agent import load_policy
    from talentrl_core.evaluation.decisions import teacher_forced
    from talentrl_core.io import write_json, write_text
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.stages import pinned_library

    p = argparse.ArgumentParser(prog="python -m pipeline.decisions", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--teacher", required=True, help="a strategy expert of the panel's family (envs.strategies)")
    p.add_argument("--panel", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.overrides)
    except ConfigError as e:
        return refuse(e)
    knowledge = open_knowledge(pinned_library(cfg, Path(args.checkpoint)))
    records, table = teacher_forced(cfg, args.panel, args.checkpoint, args.teacher, knowledge,
                                    lambda ckpt: load_policy(cfg, ckpt, temperature=0.0, name="decisions")[0], progress=True)
    write_text(args.out / "records.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    metrics = {"checkpoint": args.checkpoint, "teacher": args.teacher, "panel": args.panel, "decisions": table}
    write_json(args.out / "metrics.json", metrics)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
