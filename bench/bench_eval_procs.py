"""Evaluation on 2 cores: two systems in one process of two threads vs in two processes of one thread each.

Evaluation is bound as much by the Python and the environment around the model as by its FLOPs
(``docs/performance.md``), so a second process may use the second core better than a second compute thread. Both
ways evaluate the same systems on the same tasks of one panel, from a finished run's artifacts (its games, library
and models, linked into a scratch folder per process), through the CLI a user runs (``pipeline.run evaluate``,
start-up included). Prints each way's wall time, the ratio, and whether the two ways' episodes agree task by task.
Never asserts timing.

    .venv/bin/python bench/bench_eval_procs.py --artifacts /work/runs/alf_d \\
        --overrides "experiment=alfworld_prompt_loss" --panel alfworld_valid_seen --n 16
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKED = ("cache", "library", "models", "trajectories")


def scratch(artifacts: Path, parent: Path, name: str) -> Path:
    """A folder whose games, library and models are ``artifacts``'s (links), with an evaluation of its own."""
    out = parent / name
    out.mkdir()
    for d in LINKED:
        if (artifacts / d).exists():
            (out / d).symlink_to((artifacts / d).resolve())
    return out


def evaluate(folder: Path, overrides: list[str], systems: list[str], panel: str, n: int, threads: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipeline.run", "evaluate", *overrides, f"artifacts_dir={folder}", "tracker.mode=disabled",
           f"model.threads={threads}", f"eval.systems=[{','.join(systems)}]", f"eval.panels=[{panel}]",
           f"eval.n_per_panel={n}"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))


def finish(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"evaluate failed (exit {p.returncode}): {err.strip().splitlines()[-1] if err.strip() else ''}")


def outcomes(folders: list[Path]) -> dict[tuple[str, str], bool]:
    got = {}
    for f in folders:
        for line in (f / "eval" / "episodes.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r.get("sample_idx", 0) == 0:
                got[(r["system"], r["task_id"])] = bool(r["success"])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", type=Path, default=ROOT / "artifacts",
                    help="a finished run's artifacts_dir (models, library); default: make demo's")
    ap.add_argument("--overrides", default="experiment=demo", help="the run's Hydra overrides, one string")
    ap.add_argument("--systems", default="talent_sft,flat_skillbank", help="comma-separated, one process each")
    ap.add_argument("--panel", default="textworld")
    ap.add_argument("--n", type=int, default=32, help="tasks of the panel")
    args = ap.parse_args()
    trained = [s for s in args.systems.split(",") if not s.startswith(("strategy:", "random_action"))]
    if trained and not (args.artifacts / "models").is_dir():
        print(f"skipped: no finished run at {args.artifacts} (run make demo, or pass --artifacts)")
        return
    overrides, systems = shlex.split(args.overrides), args.systems.split(",")
    with tempfile.TemporaryDirectory(prefix="bench_eval_procs_") as tmp:
        tmp = Path(tmp)
        one = scratch(args.artifacts, tmp, "one")
        t0 = time.perf_counter()
        finish([evaluate(one, overrides, systems, args.panel, args.n, threads=2)])
        t_one = time.perf_counter() - t0
        each = [scratch(args.artifacts, tmp, f"proc{i}") for i in range(len(systems))]
        t0 = time.perf_counter()
        finish([evaluate(f, overrides, [s], args.panel, args.n, threads=1) for f, s in zip(each, systems)])
        t_each = time.perf_counter() - t0
        a, b = outcomes([one]), outcomes(each)
    same = sum(a[k] == b.get(k) for k in a)
    print(f"{len(systems)} systems x {args.n} tasks of {args.panel}, from {args.artifacts}")
    print(f"  one process, 2 threads      {t_one:8.1f} s   1.00x the baseline")
    print(f"  {len(systems)} processes, 1 thread each {t_each:8.1f} s   {t_one / t_each:.2f}x the baseline's speed")
    print(f"  episodes with the same outcome both ways: {same} of {len(a)}")


if __name__ == "__main__":
    main()
