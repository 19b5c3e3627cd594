"""Per-decision accuracy against the teacher (``talentrl_core.evaluation.decisions``): the teacher plays every step
of a panel's tasks and the checkpoint, shown the same prompt with the teacher's talent, names its command first.

    .venv/bin/python -m pipeline.decisions experiment=webshop --checkpoint artifacts/models/sft --teacher rank_order \\
        --panel webshop --out docs/results/webshop/decisions

Writes ``records.jsonl`` (one row per decision: teacher's command, the policy's, its class, correct, its episode and
step) and ``metrics.json`` (accuracy per decision class and overall) into ``--out``. ``--rank`` also scores every admissible
command by its whole log-probability and records the teacher's rank among them (per class: how often it scored first,
its median rank): whether the model prefers the right command even where greedy decoding names another.
``--records FILE`` (an earlier run's ``records.jsonl``, gzipped or not) recomputes the table from those records, no
model: the rows a later version adds (WebShop's option groups) for a run already read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from pipeline.errors import named_errors


@named_errors("pipeline.decisions")
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline.diagnostic_cli import run_diagnostic

    def add_args(p):
        p.add_argument("--checkpoint", help="the checkpoint to score (required unless --records)")
        p.add_argument("--records", type=Path, help="recompute the table from an earlier run's records.jsonl[.gz]")
        p.add_argument("--teacher", help="a strategy expert of the panel's family (envs.strategies; required unless "
                       "--records)")
        p.add_argument("--panel", required=True)
        p.add_argument("--rank", action="store_true", help="also score every admissible command by its whole "
                       "log-probability: the teacher's rank among them (slower: one scoring pass a decision)")

    return run_diagnostic("python -m pipeline.decisions", __doc__, add_args, decisions, argv, rows_name="records.jsonl")


def decisions(cfg, args):
    if args.records is not None:
        return retable(args.records, args.panel)
    if not (args.checkpoint and args.teacher):
        raise ValueError("--checkpoint and --teacher are required (or --records to recompute a table)")
    from talentrl_core.agent import load_policy
    from talentrl_core.evaluation.decisions import teacher_forced
    from talentrl_core.knowledge import open_knowledge
    from talentrl_core.stages import pinned_library

    knowledge = open_knowledge(pinned_library(cfg, Path(args.checkpoint)))
    records, table = teacher_forced(cfg, args.panel, args.checkpoint, args.teacher, knowledge,
                                    lambda ckpt: load_policy(cfg, ckpt, temperature=0.0, name="decisions")[0], progress=True,
                                    rank=args.rank)
    return records, {"checkpoint": args.checkpoint, "teacher": args.teacher, "panel": args.panel, "decisions": table}


def retable(path: Path, panel: str):
    """(records, metrics) recomputed from ``path``, one checkpoint's records (a file merged from several, as
    ``p5/records.jsonl.gz``, would be pooled); the teacher's success and the checkpoint are kept from the
    ``metrics.json`` beside it."""
    from talentrl_core.envs.registry import family_spec, panel_family
    from talentrl_core.evaluation.decisions import accuracy_table
    from talentrl_core.io import iter_jsonl, read_json

    try:
        records = [row for _, row in iter_jsonl(path)]  # a malformed line: ValueError naming file:line
    except (OSError, EOFError) as e:  # missing, or not gzip though named .gz
        raise ValueError(f"cannot read the records {path}: {e}") from e
    before = read_json(path.parent / "metrics.json") if (path.parent / "metrics.json").is_file() else {}
    table = accuracy_table(records, family_spec(panel_family(panel)[0]).decision_detail)
    if "teacher_success" in before.get("decisions", {}):
        table["teacher_success"] = before["decisions"]["teacher_success"]
    return records, {"checkpoint": before.get("checkpoint"), "teacher": before.get("teacher"), "panel": panel,
                     "decisions": table}


if __name__ == "__main__":
    sys.exit(main())
