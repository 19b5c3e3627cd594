"""Skill retrieval at scale: latency p50/p99 and recall@K against exact brute force.

Synthetic skills are random 384-d unit vectors (built in chunks). A query is a stored skill plus noise
(cosine ≈ 0.7 to it), so every query has one planted neighbour: ``hit@1`` says whether it came first, and
``recall@K`` compares the top K with the exact top K of a numpy brute force. Rows:

* ``numpy exact``    — X @ q + argpartition: the ground truth, and what ``Library.retrieve`` does per env;
* ``SkillIndex``     — the library's in-memory index (cos + λ·w, δ, per-kind top-K; here λ>0, one talent);
* ``lance flat``     — LanceDB search without an index (exact scan, cosine);
* ``lance ivfpq``    — LanceDB with ``IvfPq(distance_type="cosine")`` (lancedb 0.40 config API):
  ``nprobes`` as given without and with ``refine_factor`` 10 (exact re-ranking of 10·K candidates),
  and 4×``nprobes`` with refine 10.

Random vectors are the hard case for IVF-PQ (neighbours are barely closer than anything else), so its
recall here is a floor, not what a real skill library shows.

    python bench/bench_retrieval.py                       # 10k, 100k, 1M (≈ 4 min on 2 busy cores)
    OPENBLAS_NUM_THREADS=2 python bench/bench_retrieval.py   # numpy with 2 BLAS threads (default: 1)
    python bench/bench_retrieval.py --sizes 10000 --queries 50
"""

from __future__ import annotations

import os

# One BLAS thread unless told otherwise: a rollout worker calls retrieval from one thread, and on a shared
# 2-core machine a 2-thread OpenBLAS gemv was measured 25x slower than a 1-thread one (thread contention).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import IvfPq

from talentrl_core.library.retrieval import SkillIndex
from talentrl_core.library.schema import SkillRecord, TalentRecord

DIM = 384
CHUNK = 100_000


def make_vectors(n: int, seed: int) -> np.ndarray:
    """(n, DIM) float32 unit vectors, generated chunk by chunk to bound temporaries."""
    X = np.empty((n, DIM), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for i in range(0, n, CHUNK):
        c = rng.standard_normal((min(CHUNK, n - i), DIM), dtype=np.float32)
        X[i : i + len(c)] = c / np.linalg.norm(c, axis=1, keepdims=True)
    return X


def make_queries(X: np.ndarray, n_q: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    planted = rng.choice(np.arange(0, len(X), 3), n_q, replace=False)  # rows of kind 'specific' in skill_index
    noise = rng.standard_normal((n_q, DIM), dtype=np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    Q = X[planted] + 1.0 * noise  # cos(q, planted) ≈ 1/√2
    return Q / np.linalg.norm(Q, axis=1, keepdims=True), planted


def exact_topk(X: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    s = X @ q
    idx = np.argpartition(-s, k)[:k]
    return idx[np.argsort(-s[idx], kind="stable")]


def timed(fn, queries) -> tuple[list, np.ndarray]:
    out, lat = [], []
    for q in queries:
        t = time.perf_counter()
        out.append(fn(q))
        lat.append(time.perf_counter() - t)
    return out, np.asarray(lat) * 1000.0


def summary(name: str, n: int, lat_ms: np.ndarray, results, truth, planted, k: int, extra: str = "") -> dict:
    recall = float(np.mean([len(set(map(int, r[:k])) & set(map(int, t))) / k for r, t in zip(results, truth)]))
    hit1 = float(np.mean([len(r) > 0 and int(r[0]) == int(p) for r, p in zip(results, planted)]))
    return {"n": n, "method": name, "p50_ms": float(np.percentile(lat_ms, 50)), "p99_ms": float(np.percentile(lat_ms, 99)),
            f"recall@{k}": recall, "hit@1": hit1, "queries": len(lat_ms), "note": extra}


def lance_table(db, X: np.ndarray):
    schema = pa.schema([("id", pa.int64()), ("vector", pa.list_(pa.float32(), DIM))])
    tbl = None
    for i in range(0, len(X), CHUNK):
        c = X[i : i + CHUNK]
        batch = pa.table({"id": pa.array(np.arange(i, i + len(c))), "vector": pa.FixedSizeListArray.from_arrays(pa.array(c.reshape(-1)), DIM)}, schema=schema)
        tbl = db.create_table("skills", batch, mode="overwrite") if tbl is None else tbl
        if i:
            tbl.add(batch)
    return tbl


def lance_search(tbl, k: int, nprobes: int | None = None, refine: int | None = None, flat: bool = False):
    def run(q):
        b = tbl.search(q).distance_type("cosine").limit(k).select(["id", "_distance"])
        if flat:
            b = b.bypass_vector_index()
        if nprobes:
            b = b.nprobes(nprobes)
        if refine:
            b = b.refine_factor(refine)
        return b.to_arrow().column("id").to_numpy()

    return run


def skill_index(X: np.ndarray, seed: int) -> SkillIndex:
    kinds = ("specific", "general", "mistake")
    skills = [SkillRecord(f"s{i:07d}", "bench", kinds[i % 3], [], "", "", vector=X[i]) for i in range(len(X))]
    rng = np.random.default_rng(seed + 2)
    linked = rng.choice(len(X), min(100, len(X)), replace=False)
    talent = TalentRecord("T", "bench", "t", "", "", [f"s{i:07d}" for i in linked], [0.5] * len(linked))
    idx = SkillIndex(skills, [talent], DIM)
    idx.matrix = X  # share the benchmark's matrix (same rows, same order: ids are zero-padded)
    return idx


def bench_size(n: int, n_q: int, k: int, nprobes: int, seed: int, workdir: Path, flat_queries: int) -> list[dict]:
    rows: list[dict] = []
    t0 = time.perf_counter()
    X = make_vectors(n, seed)
    Q, planted = make_queries(X, n_q, seed)
    print(f"[{n:>9,}] vectors in {time.perf_counter() - t0:.1f}s", flush=True)
    truth, lat = timed(lambda q: exact_topk(X, q, k), Q)
    rows.append(summary("numpy exact", n, lat, truth, truth, planted, k))
    if n <= 100_000:
        idx = skill_index(X, seed)
        res, lat = timed(lambda q: idx.search(q, "T", 0.0, -1.0, {"specific": k, "general": 0, "mistake": 0}), Q)
        # λ = 0 here so the ranking is comparable with the exact top K of the specific third
        spec = np.flatnonzero(np.arange(n) % 3 == 0)
        sub_truth = [spec[exact_topk(X[spec], q, k)] for q in Q]
        ids = [[int(s.skill_id[1:]) for s in r] for r in res]
        rows.append(summary("SkillIndex (1 kind)", n, lat, ids, sub_truth, planted, k, "top-K of the 'specific' third (exact)"))
        _, lat = timed(lambda q: idx.search(q, "T", 0.3, 0.0, {"specific": 2, "general": 2, "mistake": 1}), Q)
        rows.append({"n": n, "method": "SkillIndex λ=0.3 δ=0 2/2/1", "p50_ms": float(np.percentile(lat, 50)),
                     "p99_ms": float(np.percentile(lat, 99)), "queries": len(lat), "note": "the per-step call"})
    db = lancedb.connect(str(workdir / f"n{n}"))
    t0 = time.perf_counter()
    tbl = lance_table(db, X)
    write_s = time.perf_counter() - t0
    fq = min(n_q, flat_queries)
    res, lat = timed(lance_search(tbl, k, flat=True), Q[:fq])
    rows.append(summary("lance flat", n, lat, res, truth[:fq], planted[:fq], k, f"write {write_s:.1f}s"))
    parts = int(min(max(16, round(np.sqrt(n))), 256))
    t0 = time.perf_counter()
    # training on 32 samples per partition, 10 k-means iterations: the build is dominated by encoding all rows
    tbl.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=parts, num_sub_vectors=DIM // 8,
                                            max_iterations=10, sample_rate=32))
    build_s = time.perf_counter() - t0
    for probes, refine in ((nprobes, None), (nprobes, 10), (4 * nprobes, 10)):
        res, lat = timed(lance_search(tbl, k, nprobes=probes, refine=refine), Q)
        rows.append(summary(f"lance ivfpq np={probes}{' refine=' + str(refine) if refine else ''}", n, lat, res, truth, planted, k,
                            f"partitions={parts}, build {build_s:.1f}s"))
    print(f"[{n:>9,}] done in {time.perf_counter() - t0 + write_s:.1f}s of lance work", flush=True)
    del X
    shutil.rmtree(workdir / f"n{n}", ignore_errors=True)
    return rows


def print_table(rows: list[dict], k: int) -> None:
    print(f"\n{'n':>9} | {'method':<28} | {'p50 ms':>8} | {'p99 ms':>8} | {'speed-up p50':>12} | {'recall@' + str(k):>9} | {'hit@1':>5} | note")
    print("-" * 120)
    base = {r["n"]: r["p50_ms"] for r in rows if r["method"] == "numpy exact"}
    for r in rows:
        rec = r.get(f"recall@{k}")
        hit = r.get("hit@1")
        print(f"{r['n']:>9,} | {r['method']:<28} | {r['p50_ms']:>8.3f} | {r['p99_ms']:>8.3f} | {base[r['n']] / r['p50_ms']:>11.2f}x | "
              f"{'' if rec is None else f'{rec:.3f}':>9} | {'' if hit is None else f'{hit:.2f}':>5} | {r.get('note', '')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--flat-queries", type=int, default=10, help="queries for the (slow) lance flat scan")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nprobes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="also write the rows as JSON here")
    args = ap.parse_args()
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    rows: list[dict] = []
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            rows += bench_size(n, args.queries, args.k, args.nprobes, args.seed, work, args.flat_queries)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows, args.k)
    print(f"\ntotal {time.perf_counter() - t0:.0f}s; speed-up = numpy exact p50 / method p50 (same n); "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_retrieval")(main)())
