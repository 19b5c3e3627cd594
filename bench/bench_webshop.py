"""WebShop: environment steps per second, search latency p50/p95, and the projected cost at 1.18M products.

Rows, all in one run:

* ``env steps``  — expert episodes on the test goals (search, clicks, purchase with its reward): steps/s;
* ``search``     — latency of ``search[<instruction>]`` (top 50) for each index backend: ``memory`` (bm25s in
  RAM) and ``mmap`` (saved once, memory-mapped: what serves a catalogue bigger than RAM), against
  ``rank_bm25`` (the QA retriever's library, pure Python scoring of every document) as the baseline;
  the ratio is baseline p50 / backend p50;
* ``scale``      — build time, index size on disk and p50/p95 latency of the ``mmap`` backend on catalogues of
  1k, 10k and 50k products (the 1,000 products repeated with distinct ids), and the linear projection of each
  figure to WebShop's full 1,181,436 products. bm25s scores a query from its terms' posting lists, so
  latency grows with the number of matching documents, not with the catalogue's size alone.

    python bench/bench_webshop.py
    python bench/bench_webshop.py --scales 1000 --queries 50      # quick
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from talentrl_core.config import EnvConfig, EnvName
from talentrl_core.envs import make_family
from talentrl_core.envs.webshop import play_expert
from talentrl_core.envs.webshop_data import SearchIndex

FULL_SCALE = 1_181_436
"Products in WebShop's full catalogue (items_shuffle.json)."


def _pct(xs: list[float]) -> tuple[float, float]:
    return float(np.percentile(xs, 50)), float(np.percentile(xs, 95))


def _latencies(search, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t0 = time.perf_counter()
        search(q)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def env_steps(family, n: int) -> dict:
    env = family.make()
    tasks = family.tasks("test")[:n]
    t0 = time.perf_counter()
    res = [play_expert(env, t) for t in tasks]
    dt = time.perf_counter() - t0
    steps = sum(r["steps"] for r in res)
    return {"episodes": len(res), "steps": steps, "steps_per_s": steps / dt, "expert_success": sum(r["won"] for r in res) / len(res)}


def search_rows(shop, queries: list[str], tmp: Path) -> list[dict]:
    from rank_bm25 import BM25Okapi

    asins = list(shop.products)
    docs = [(shop.products[a].contents or shop.products[a].title).lower().split() for a in asins]
    okapi = BM25Okapi(docs, k1=0.9, b=0.4)

    def baseline(q: str):
        s = okapi.get_scores(q.lower().split())
        return [asins[i] for i in np.argsort(-s)[:50]]

    base = _latencies(baseline, queries)
    rows = [{"backend": "rank_bm25 (baseline)", "p50_ms": _pct(base)[0], "p95_ms": _pct(base)[1], "ratio": 1.0}]
    for backend in ("memory", "mmap"):
        idx = SearchIndex(shop.products, backend=backend, index_dir=tmp / f"idx-{backend}")
        lat = _latencies(idx.search, queries)
        p50, p95 = _pct(lat)
        rows.append({"backend": backend, "p50_ms": p50, "p95_ms": p95, "ratio": rows[0]["p50_ms"] / p50})
    return rows


def _dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def scale_rows(shop, queries: list[str], scales: list[int], tmp: Path) -> list[dict]:
    base = list(shop.products.values())
    rows = []
    for n in scales:
        prods = {}
        for i in range(n):
            p = base[i % len(base)]
            asin = p.asin if i < len(base) else f"X{i:09d}"
            prods[asin] = replace(p, asin=asin)
        t0 = time.perf_counter()
        idx = SearchIndex(prods, backend="mmap", index_dir=tmp / f"scale-{n}")
        build = time.perf_counter() - t0
        p50, p95 = _pct(_latencies(idx.search, queries))
        rows.append({"products": n, "build_s": build, "disk_mb": _dir_mb(tmp / f"scale-{n}"), "p50_ms": p50, "p95_ms": p95})
    last = rows[-1]
    f = FULL_SCALE / last["products"]
    rows.append({"products": FULL_SCALE, "build_s": last["build_s"] * f, "disk_mb": last["disk_mb"] * f,
                 "p50_ms": last["p50_ms"] * f, "p95_ms": last["p95_ms"] * f, "projected": True})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("TALENTRL_DATA_DIR", "../shared/data"))
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--scales", default="1000,10000,50000")
    args = ap.parse_args()
    data = Path(args.data_dir)
    cfg = EnvConfig(name=EnvName.webshop, max_steps=15)
    cfg.webshop_products = str(data / "webshop" / "minimal_documents_1000.jsonl")
    cfg.webshop_instructions = str(data / "webshop" / "items_ins_v2_1000.json")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        family = make_family(cfg, tmp / "cache")
        shop = family.shop
        load_s = time.perf_counter() - t0
        queries = [g["instruction_text"] for g in shop.splits["test"][: args.queries]]
        steps = env_steps(family, args.episodes)
        search = search_rows(shop, queries, tmp)
        scale = scale_rows(shop, queries, [int(s) for s in args.scales.split(",")], tmp)
    print(f"catalogue load + goals + index: {load_s:.2f} s ({len(shop.products)} products, {len(shop.goals)} goals)")
    print(f"env: {steps['steps']} steps in {steps['episodes']} expert episodes, {steps['steps_per_s']:.0f} steps/s, "
          f"expert success {steps['expert_success']:.3f}")
    print(f"\nsearch latency over {len(queries)} instruction queries (top 50), 1,000 products")
    print(f"{'backend':<22}{'p50 ms':>9}{'p95 ms':>9}{'ratio vs baseline':>20}")
    for r in search:
        print(f"{r['backend']:<22}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['ratio']:>19.1f}x")
    print("\nmmap backend by catalogue size (last row: linear projection to WebShop's full catalogue)")
    print(f"{'products':>10}{'build s':>10}{'disk MB':>10}{'p50 ms':>9}{'p95 ms':>9}")
    for r in scale:
        mark = " (projected)" if r.get("projected") else ""
        print(f"{r['products']:>10}{r['build_s']:>10.1f}{r['disk_mb']:>10.1f}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{mark}")
    print(json.dumps({"env": steps, "search": search, "scale": scale}))


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_webshop")(main)())
