"""SFT step time at WebShop's 2,048 tokens: eager vs sdpa attention, each with glibc's defaults and with freed memory
kept by the allocator (``talentrl_core.memory``).

On CPU a training step allocates and frees the same large activations every micro-batch (at 2,048 tokens eager
attention alone stores 4 heads x 2,048 x 2,048 scores a row and layer). glibc serves blocks above its mmap threshold
(at most 32 MiB) with a fresh ``mmap`` and unmaps them on free, so the next micro-batch touches new pages: a minor
page fault and a zeroed 4 KiB page each, in the kernel. Measured during WebShop's SFT on 2 cores (2026-12-06,
``perf``): 546,000 minor faults a second, 52% of the samples in the kernel (page faults, their locks, memcg
charging, page clearing). This bench runs, each in its own process, in one go and ``--rounds`` times interleaved:

1. eager attention (what ``model.attn_implementation=auto`` picked for bf16 on a CPU until 2026-12-06), glibc
   defaults: the baseline;
2. eager attention, freed memory kept (``keep_freed_memory``: ``mallopt`` turns off mmap for large blocks and
   trimming, so blocks are reused from the heap: no fault, no zeroing after the first step);
3. sdpa attention (the scores are never stored whole), glibc defaults;
4. sdpa attention, freed memory kept.

Each prints seconds per step (median after the warm-up), minor page faults per step, the kernel's share of the
process's CPU time, peak resident memory, and the speed against run 1. A step is forward + backward on ``--batch``
rows of ``--length`` tokens in micro-batches of 4 under the compute dtype ``precision.py`` resolves, then AdamW, of
the WebShop model (Qwen2 256 x 8, ffn 768, random init; ``bench/common.py``), as ``sft.py`` trains. (Tried and
dropped: torch's ``THP_MEM_ALLOC_ENABLE=1``, 2 MiB pages: 4x fewer faults but 0.82x the speed, the huge pages still
zeroed.)

    .venv/bin/python bench/bench_alloc.py                  # ~3 min on 2 idle cores
    .venv/bin/python bench/bench_alloc.py --length 512 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = (("eager attention, glibc defaults", "eager", False), ("eager attention, freed memory kept", "eager", True),
            ("sdpa attention, glibc defaults", "sdpa", False), ("sdpa attention, freed memory kept", "sdpa", True))


def worker(args) -> dict:
    from talentrl_core.memory import keep_freed_memory

    kept = keep_freed_memory()  # on where run() set TALENTRL_KEEP_FREED_MEMORY=1
    import torch

    from bench.common import bench_model, sft_step
    from talentrl_core.precision import resolve_compute_dtype

    torch.set_num_threads(args.threads)
    dtype = resolve_compute_dtype(args.dtype)
    model = bench_model(args.vocab, args.length, attn_implementation=args.attn)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, args.vocab, (args.batch, args.length))
    times, faults, kernel = [], [], []
    for step in range(args.warmup + args.steps):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        sft_step(model, opt, ids.split(4), dtype)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
            faults.append(r1.ru_minflt - r0.ru_minflt)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            kernel.append((r1.ru_stime - r0.ru_stime) / cpu if cpu else 0.0)
    return {"kept": kept, "s_per_step": statistics.median(times), "faults_per_step": int(statistics.median(faults)),
            "kernel_share": round(statistics.median(kernel), 3),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run(attn: str, keep: bool, args) -> dict:
    from bench.common import run_worker  # here, not at the top: a worker imports torch after its settings

    env = {**os.environ, "TALENTRL_KEEP_FREED_MEMORY": "1" if keep else "0"}
    r = run_worker(__file__, args, ("steps", "warmup", "batch", "length", "threads", "vocab", "dtype"), env, "--attn", attn)
    assert r["kept"] == keep, f"keep_freed_memory gave {r['kept']}, asked {keep} (not glibc?)"
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8, help="rows of a step")
    ap.add_argument("--length", type=int, default=2048, help="tokens a row (WebShop's SFT cut)")
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--attn", default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="auto", help="compute dtype (precision.py: auto = bf16 autocast where native)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads of every run (fixed, so runs compare)")
    ap.add_argument("--rounds", type=int, default=1, help="run the four variants this many times, interleaved")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    rows: dict[str, list[dict]] = {label: [] for label, _, _ in VARIANTS}
    for _ in range(args.rounds):
        for label, attn, keep in VARIANTS:
            r = run(attn, keep, args)
            rows[label].append(r)
            print(f"{label:42s} {r['s_per_step']:7.3f} s/step  {r['faults_per_step']:>9,} faults/step  "
                  f"kernel {r['kernel_share']:.0%}  peak {r['peak_rss_mib']:,} MiB", flush=True)
    base = statistics.median(r["s_per_step"] for r in rows[VARIANTS[0][0]])
    print(f"\n{args.threads} thread(s): batch {args.batch} x {args.length} tokens a step, median of {args.steps} steps, "
          f"{args.rounds} round(s)")
    summary = []
    for label, runs in rows.items():
        s = statistics.median(r["s_per_step"] for r in runs)
        summary.append({"run": label, "s_per_step": round(s, 3), "speedup": round(base / s, 3), "runs": runs})
        print(f"{label:42s} {base / s:6.2f}x the baseline's speed")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": summary}, indent=2) + "\n")


if __name__ == "__main__":
    main()
