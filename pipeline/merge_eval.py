"""Merge evaluation runs of disjoint systems on the same panels into one report: evaluate the systems in parallel
processes (or machines), each writing its own ``<artifacts>/eval`` (or take a committed ``docs/results`` folder,
whose episodes are gzipped), then

    .venv/bin/python -m pipeline.merge_eval artifacts/eval other/eval --out docs/results/x

Two runs of one system (a model before and after a change, both named ``talent_sft``) merge once one is renamed:
``--rename 2 talent_sft talent_sft_dagger`` renames the system in the second run; ``--pair A B`` (repeatable) adds the
paired comparison A vs B to the report's table. ``--only 1 a,b`` takes just the systems a and b of the first run
(a committed folder that holds more than the merge needs: the rest is run again).

Every statistic is recomputed from the merged ``episodes.jsonl`` (``evaluation.build_metrics``, the same code the
evaluate stage runs); the runs' timings, library versions and strategy matrices are carried over. Refused: a system
in two runs, or panels whose tasks differ between runs (paired tests need the same tasks).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from pipeline.errors import named_errors


def merge(runs: Sequence[Path], ci: str = "wilson", seed: int = 0, rename: Mapping[int, Mapping[str, str]] | None = None,
          pairs: Sequence[tuple[str, str]] = (), only: Mapping[int, Sequence[str]] | None = None) -> tuple[list[dict], dict]:
    """(merged episode rows, metrics) of evaluation folders holding ``episodes.jsonl`` and ``metrics.json``;
    ``ci`` and ``seed`` as the runs' ``eval.ci`` and ``eval.seed``; ``rename``: run index (0-based) → {old system
    name: new}; ``pairs``: paired comparisons beyond the default ones; ``only``: run index → the systems taken from it
    (before renaming; the others left out)."""
    from talentrl_core.evaluation.metrics import EpisodeResult, build_metrics
    from talentrl_core.evaluation.talent_effect import talent_metrics

    rows, metas, owner, tasks = [], [], {}, {}
    for i, run in enumerate(runs):
        got = episode_rows(run)
        meta = json.loads((run / "metrics.json").read_text())
        if i in (only or {}):
            keep = set(only[i])
            if missing := sorted(keep - {r["system"] for r in got}):
                raise ValueError(f"--only: {run} has no system {', '.join(missing)}")
            got = [r for r in got if r["system"] in keep]
            for key in ("perf", "library_versions", "skipped_systems"):
                meta[key] = {s: v for s, v in (meta.get(key) or {}).items() if s in keep}
        names = dict((rename or {}).get(i, {}))
        if missing := sorted(set(names) - {r["system"] for r in got}):
            raise ValueError(f"--rename: {run} has no system {', '.join(missing)}")
        got = [{**r, "system": names.get(r["system"], r["system"])} for r in got]
        for key in ("perf", "library_versions", "skipped_systems"):
            meta[key] = {names.get(s, s): v for s, v in (meta.get(key) or {}).items()}
        for system in sorted({r["system"] for r in got}):
            if system in owner:
                raise ValueError(f"{system} is in both {owner[system]} and {run}: merge runs of disjoint "
                                 "systems, or rename one (--rename)")
            owner[system] = run
        for panel in sorted({r["panel"] for r in got}):
            ids = sorted({r["task_id"] for r in got if r["panel"] == panel})
            if tasks.setdefault(panel, ids) != ids:
                raise ValueError(f"panel {panel}: {run} evaluated other tasks than {runs[0]} (same config and "
                                 "eval.seed give the same tasks)")
        rows += got
        metas.append(meta)
    if unknown := sorted({s for pair in pairs for s in pair} - set(owner)):
        raise ValueError(f"--pair: no run has {', '.join(unknown)}; the systems: {', '.join(sorted(owner))}")
    results = [EpisodeResult(**r) for r in rows]
    metrics = build_metrics(results, ci=ci, seed=seed, pairs=pairs)
    metrics["perf"] = {s: p for m in metas for s, p in (m.get("perf") or {}).items()}
    metrics["library_versions"] = {s: v for m in metas for s, v in (m.get("library_versions") or {}).items()}
    metrics["skipped_systems"] = {s: why for m in metas for s, why in (m.get("skipped_systems") or {}).items() if s not in owner}
    metrics["zero_shot_model"] = next((m["zero_shot_model"] for m in metas if "zero_shot_model" in m), "")
    matrices = {p: mx for m in metas for p, mx in ((m.get("talents") or {}).get("matrix") or {}).items()}
    metrics["talents"] = talent_metrics(results, matrices)
    metrics["merged_from"] = [str(r) for r in runs]
    return rows, metrics


def episode_rows(run: Path) -> list[dict]:
    """The episode rows of an evaluation folder: ``episodes.jsonl`` as the evaluate stage writes it, or
    ``episodes.jsonl.gz`` as ``docs/results`` commits it (so a new run merges with a committed one)."""
    from talentrl_core.io import iter_jsonl

    plain, packed = run / "episodes.jsonl", run / "episodes.jsonl.gz"
    if not (plain.is_file() or packed.is_file()):
        raise FileNotFoundError(f"{run} holds neither episodes.jsonl nor episodes.jsonl.gz")
    return [row for _, row in iter_jsonl(plain if plain.is_file() else packed)]


@named_errors("pipeline.merge_eval")
def main(argv: Sequence[str] | None = None) -> int:
    from talentrl_core.evaluation.metrics import routing_confusion
    from talentrl_core.evaluation.report import write_report
    from talentrl_core.io import write_text

    p = argparse.ArgumentParser(prog="python -m pipeline.merge_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="evaluation folders (episodes.jsonl + metrics.json)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ci", default="wilson", help="the runs' eval.ci")
    p.add_argument("--seed", type=int, default=0, help="the runs' eval.seed")
    p.add_argument("--rename", nargs=3, action="append", default=[], metavar=("RUN", "SYSTEM", "NEW"),
                   help="rename SYSTEM of the RUN-th run (1-based) to NEW; repeatable")
    p.add_argument("--only", nargs=2, action="append", default=[], metavar=("RUN", "SYSTEMS"),
                   help="take only SYSTEMS (comma-separated) of the RUN-th run (1-based); repeatable")
    p.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                   help="also compare A vs B on the same tasks (exact McNemar); repeatable")
    args = p.parse_args(argv)

    def position(flag: str, k: str) -> int:  # RUN, 1-based on the command line, 0-based for merge()
        if not k.isdigit() or not 1 <= int(k) <= len(args.runs):
            p.error(f"{flag} {k}: RUN is a run's position, 1 to {len(args.runs)}")
        return int(k) - 1

    rename: dict[int, dict[str, str]] = {}
    for k, old, new in args.rename:
        rename.setdefault(position("--rename", k), {})[old] = new
    only: dict[int, list[str]] = {}
    for k, names in args.only:
        only.setdefault(position("--only", k), []).extend(n for n in names.split(",") if n)
    rows, metrics = merge(args.runs, args.ci, args.seed, rename, [tuple(x) for x in args.pair], only)
    write_report(metrics, args.out, confusion=routing_confusion(rows))
    write_text(args.out / "episodes.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print(json.dumps({s: {p: round(b["success"], 3) for p, b in panels.items()} for s, panels in metrics["systems"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
