"""Seed replicates of the main run, and the pooled paired tests over them (DESIGN.md §6, issue 14).

    python -m pipeline.seeds [hydra overrides...] --from artifacts --seeds 1 2 --out docs/results/talents
    python -m pipeline.seeds [hydra overrides...] --redraw sft --from artifacts --seeds 1 2 --out docs/results/sft-draws

For each seed N: a folder ``<from>/seeds/seed<N>`` whose trajectories, library and base/SFT models link to
``<from>``'s, then the ``rl`` stage (TalentRL and flat GRPO, ``rl.seed=N``) and the ``evaluate`` stage for the
RL systems only. Each stage resumes like any pipeline stage, so an interrupted replicate re-runs to the same
place. ``<from>/eval`` itself is seed 0 (the pipeline's own ``rl.seed`` default).

Then ``<out>/seed<N>/`` gets each seed's ``metrics.json`` and ``episodes.jsonl``, and ``<out>/pooled.json``
the per-seed exact McNemar tests of ``talentrl`` vs ``flat_grpo`` (and vs ``talent_sft`` where seed 0 has it) and,
across seeds, a task-level sign test: a task counts once whatever the number of seeds (the seeds' pairs on one panel
are not independent). ``--pool-only`` recomputes ``pooled.json`` from ``<out>`` alone.

A negative seed or a ``--from`` that is not a folder is refused by name before any folder is made; every failure
ends in one line ``pipeline.seeds: error: …`` (``TALENTRL_TRACEBACK=1`` shows the traceback).

``--redraw sft`` replicates the SFT draw instead (the demo's router is learned fully, partly or not at all depending
on it: docs/talents.md §11): ``<from>/sft_seeds/seed<N>`` links trajectories, library and base model only, and runs
sft (``sft.seed=N``), rl (both systems) and evaluate (every system), so each draw has its own talent_sft and
flat_skillbank. ``pooled.json`` then also tests ``talent_sft vs flat_skillbank`` and ``oracle_talent vs
random_talent`` per draw and across the draws.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Sequence

from talentrl_core.systems import HEADLINE_PAIRS, RL_SYSTEMS, SYSTEMS

from .env import offline_defaults
from .errors import named_errors

LINKED = ("trajectories", "library", "models/base", "models/sft", "cache")
"What a replicate shares with the main run (read-only for the rl and evaluate stages)."
PAIRS = tuple(p for p in HEADLINE_PAIRS if RL_SYSTEMS[0] in p)
"Pooled over RL draws: the RL system against its baselines (``systems.HEADLINE_PAIRS``)."
SFT_PAIRS = tuple(HEADLINE_PAIRS)
"Pooled over SFT draws, where every draw evaluates every system."
REDRAWS = ("rl", "sft")


def prepare_replicate(src: Path, seed: int, redraw: str = "rl") -> Path:
    """``<src>/seeds/seed<N>`` (``<src>/sft_seeds/seed<N>`` for an SFT draw) linking what the replicate reuses."""
    if redraw not in REDRAWS:
        raise ValueError(f"redraw={redraw!r}: choose from {list(REDRAWS)}")
    root = src / ("sft_seeds" if redraw == "sft" else "seeds") / f"seed{seed}"
    for rel in LINKED if redraw == "rl" else tuple(r for r in LINKED if r != "models/sft"):
        target, link = (src / rel).resolve(), root / rel
        if not target.exists() or link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    return root


def run_replicate(src: Path, seed: int, overrides: Sequence[str], redraw: str = "rl") -> Path:
    """rl (both systems) + evaluate (RL systems) for ``rl.seed=seed``; with ``redraw="sft"`` sft (``sft.seed=seed``) +
    rl + evaluate (every system). Returns the replicate's eval folder."""
    from talentrl_core.stages import evaluate, rl_both, sft

    from .config import load_config

    root = prepare_replicate(src, seed, redraw)
    base = list(overrides) + [f"artifacts_dir={root.resolve()}", f"{redraw}.seed={seed}"]  # rl.seed or sft.seed
    if redraw == "sft":
        sft(load_config(base))
    rl_both(load_config(base))
    evaluate(load_config(base if redraw == "sft" else base + [f"eval.systems=[{','.join(s for s in SYSTEMS if s in RL_SYSTEMS)}]"]))
    return root / "eval"


def _greedy(path: Path) -> dict[str, dict[str, bool]]:
    out: dict[str, dict[str, bool]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("sample_idx", 0) == 0:
            out.setdefault(r["system"], {})[f"{r['panel']}/{r['task_id']}"] = bool(r["success"])
    return out


def pooled(out: Path, pairs: Sequence[tuple[str, str]] = PAIRS) -> dict:
    """Per-seed discordant counts and exact McNemar p from ``<out>/seed*/episodes.jsonl``, and across seeds a
    task-level sign test (per task, ``a``'s successes summed over the seeds against ``b``'s: ahead, behind or tied).
    The seeds' pairs on one panel are never counted as independent (issue 38): the same task in several seeds is one
    unit of the across-seed test."""
    from talentrl_core.evaluation.stats import mcnemar_exact

    seeds = sorted((p for p in out.glob("seed*/episodes.jsonl")), key=lambda p: int(p.parent.name[4:]))
    if not seeds:
        raise FileNotFoundError(f"no seed*/episodes.jsonl under {out}")
    result: dict = {"seeds": [p.parent.name for p in seeds], "pairs": {}}
    greedy = {p: _greedy(p) for p in seeds}
    sft = greedy[seeds[0]].get("talent_sft") if seeds[0].parent.name == "seed0" else None
    for a, b in pairs:
        per, diff = {}, {}
        for p in seeds:
            g = greedy[p]
            ra, rb = g.get(a), g.get(b) or (sft if b == "talent_sft" else None)
            if not ra or not rb:
                continue
            common = sorted(set(ra) & set(rb))
            ao = sum(ra[t] and not rb[t] for t in common)
            bo = sum(rb[t] and not ra[t] for t in common)
            per[p.parent.name] = {"a_success": sum(ra[t] for t in common) / len(common), "b_success": sum(rb[t] for t in common) / len(common),
                                  "a_only": ao, "b_only": bo, "n": len(common), "p_mcnemar": mcnemar_exact(ao, bo)}
            for t in common:
                diff[t] = diff.get(t, 0) + int(ra[t]) - int(rb[t])
        if per:
            ahead, behind = sum(d > 0 for d in diff.values()), sum(d < 0 for d in diff.values())
            result["pairs"][f"{a} vs {b}"] = {
                "per_seed": per,
                "task_sign_test": {"tasks": len(diff), "ahead": ahead, "behind": behind, "p_sign": mcnemar_exact(ahead, behind)},
                "a_ahead_in_every_seed": all(v["a_success"] > v["b_success"] for v in per.values())}
    return result


def check_args(src: Path, seeds: Sequence[int], pool_only: bool) -> None:
    """Refuse, by name and before any folder is made, what would run nothing or write beside the main run."""
    bad = [s for s in seeds if s < 0]
    if bad:
        raise ValueError(f"--seeds {' '.join(map(str, bad))}: a seed is 0 (the main run itself) or more")
    if pool_only:
        return
    if not src.is_dir():
        what = "is a file, not a folder" if src.exists() else "does not exist"
        raise FileNotFoundError(f"--from {src}: {what}; give the main run's artifacts folder (its eval is seed 0, "
                                "its models/sft the replicates' start)")


@named_errors("pipeline.seeds")
def main(argv: Sequence[str] | None = None) -> int:
    offline_defaults()
    p = argparse.ArgumentParser(prog="python -m pipeline.seeds", description=__doc__.split("\n")[0])
    p.add_argument("--from", dest="src", default="artifacts", help="the main run's artifacts folder (its eval is seed 0)")
    p.add_argument("--seeds", type=int, nargs="*", default=[1, 2], help="seeds to replicate")
    p.add_argument("--redraw", choices=REDRAWS, default="rl",
                   help="rl: RL seeds on the main run's SFT checkpoint; sft: SFT draws (sft.seed), each with its own RL")
    p.add_argument("--out", default="docs/results/talents", help="where seed<N>/metrics.json, episodes.jsonl and pooled.json go")
    p.add_argument("--pool-only", action="store_true", help="only recompute pooled.json from --out")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the main run, e.g. experiment=demo")
    args = p.parse_args(argv)
    src, out = Path(args.src), Path(args.out)
    check_args(src, args.seeds, args.pool_only)
    if not args.pool_only:
        from .config import load_config

        load_config(args.overrides)  # a bad override is refused before any replicate folder is made
        evals = {0: src / "eval"} | {s: run_replicate(src, s, args.overrides, args.redraw) for s in args.seeds if s != 0}
        for s, ev in sorted(evals.items()):
            for name in ("metrics.json", "episodes.jsonl"):
                if not (ev / name).exists():
                    raise FileNotFoundError(f"{ev / name} is missing: run the pipeline (seed 0) / this replicate first")
                (out / f"seed{s}").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(ev / name, out / f"seed{s}" / name)
    res = pooled(out, SFT_PAIRS if args.redraw == "sft" else PAIRS)
    res["redraw"] = args.redraw
    from talentrl_core.io import write_json

    write_json(out / "pooled.json", res)
    print(json.dumps(res["pairs"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
