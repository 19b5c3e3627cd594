"""Does an SFT step get slower as a run goes on? Step time early vs late with samples of every length, under
glibc's default allocator, with its mmap threshold fixed, and with jemalloc where it is installed.

Seen in WebShop's SFT on 2 cores (2026-12-06, sdpa attention, the same ~18,600 tokens every step): 6 s a step at the
start, 9.7 s at step ~620 with the cores to itself; resident memory 10.2 -> 13.4 GB; ``perf`` put 15% of the
process's samples in glibc's ``_int_malloc`` at step ~300 and 30% at step ~590. A guess this bench tests: glibc raises
its mmap threshold each time it frees an mmapped block (up to 32 MiB), so after the first steps activations come from
the heap, fragment it, and each allocation searches longer. Fixing the threshold
(``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=N`` turns the sliding threshold off) keeps large blocks out of the heap;
jemalloc (``LD_PRELOAD``; Debian's ``libjemalloc2``) is the allocator PyTorch's CPU tuning guides suggest.

First result (2026-12-06, 1 thread beside the SFT above, 80 steps of 8 rows of 200-2,048 tokens): no drift under
glibc's defaults (late / early 0.78), and fixed thresholds were slower (1 MiB 0.78x, 4 MiB 0.85x the default's late
speed): this synthetic loop does not reproduce the real run's drift (fewer steps, one thread, no TRL collator).

Each variant runs in its own process: ``--steps`` SFT steps of the WebShop model (``common.py``), each of ``--batch``
rows whose length is drawn at random in [``--min-length``, ``--length``] (seeded, the same draws in every variant),
in micro-batches of 4, then AdamW. It prints the median step time of the first and last quarter of the steps, their
ratio (the drift), peak resident memory, and each variant's late step time against glibc's default.

    .venv/bin/python bench/bench_malloc_drift.py               # ~15 min on 2 idle cores
    .venv/bin/python bench/bench_malloc_drift.py --steps 300 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")  # Debian's libjemalloc2
VARIANTS = (("glibc defaults (sliding mmap threshold)", {}),
            ("glibc, mmap threshold fixed at 1 MiB", {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576"}),
            ("glibc, mmap threshold fixed at 4 MiB", {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4194304"}),
            *((("jemalloc", {"LD_PRELOAD": str(JEMALLOC)}),) if JEMALLOC.exists() else ()))


def worker(args) -> dict:
    import torch

    from bench.common import bench_model, sft_step
    from talentrl_core.precision import resolve_compute_dtype

    torch.set_num_threads(args.threads)
    dtype = resolve_compute_dtype("auto")
    model = bench_model(args.vocab, args.length)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    times = []
    for _ in range(args.steps):
        # a step's rows sorted by length (as sft.length_sorted_order batches); micro-batches padded to their longest
        lengths = sorted(rng.randint(args.min_length, args.length) for _ in range(args.batch))
        micro = [torch.randint(0, args.vocab, (len(lengths[i:i + 4]), max(lengths[i:i + 4])))
                 for i in range(0, args.batch, 4)]
        t0 = time.perf_counter()
        sft_step(model, opt, micro, dtype)
        times.append(time.perf_counter() - t0)
    q = max(1, len(times) // 4)
    return {"tunables": os.environ.get("GLIBC_TUNABLES", ""), "preload": os.environ.get("LD_PRELOAD", ""),
            "early_s": statistics.median(times[:q]), "late_s": statistics.median(times[-q:]),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run(extra_env: dict, args) -> dict:
    from bench.common import run_worker  # here, not at the top: a worker imports torch after its settings

    env = {**{k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}, **extra_env}
    return run_worker(__file__, args, ("steps", "batch", "length", "min_length", "threads", "vocab"), env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch", type=int, default=8, help="rows of a step")
    ap.add_argument("--length", type=int, default=2048, help="longest row (WebShop's SFT cut)")
    ap.add_argument("--min-length", type=int, default=200, help="shortest row")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1, help="compute threads of every run (fixed, so runs compare)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    rows = []
    for label, extra in VARIANTS:
        r = run(extra, args)
        rows.append({"run": label, "env": extra, **r, "drift": round(r["late_s"] / r["early_s"], 3)})
        print(f"{label:42s} early {r['early_s']:6.3f} s/step  late {r['late_s']:6.3f}  drift {rows[-1]['drift']:.2f}x  "
              f"peak {r['peak_rss_mib']:,} MiB", flush=True)
    base = rows[0]["late_s"]
    print(f"\n{args.threads} thread(s): {args.steps} steps of {args.batch} rows, {args.min_length}-{args.length} tokens")
    for r in rows:
        r["late_speedup"] = round(base / r["late_s"], 3)
        print(f"{r['run']:42s} {r['late_speedup']:6.2f}x glibc default's late speed")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
