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
  latency grows with the number of matching documents, not with the catalogue's size alone;
* ``policies``   — success and score (mean reward × 100) on the test goals of: the two rule baselines of
  ECOSYSTEM.md (search the instruction, buy the first result: 50.6; and choose the options whose words occur in the
  instruction: 66.9, success 0.322), the observation-only teacher's strategies (``webshop.strategies``) and the
  privileged ASIN expert, each in both search modes (``env.webshop_search``: free, choice) where it applies.

    python bench/bench_webshop.py
    python bench/bench_webshop.py --scales 1000 --queries 50      # quick
    python bench/bench_webshop.py --only policies                 # the policy table alone
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np

from talentrl_core.config import EnvConfig, EnvName
from talentrl_core.envs import make_family
from talentrl_core.envs.strategies import play, strategies
from talentrl_core.envs.webshop import play_expert
from talentrl_core.envs.webshop.data import SearchIndex

_TOKEN = re.compile(r"[a-z0-9]+")
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


def rule_episode(env, task, options: bool) -> tuple[bool, float]:
    """A rule baseline of ECOSYSTEM.md (free search): search the instruction, open the first result, (``options``:
    in each option group the item page shows, click the first value whose words all occur in the instruction,)
    buy."""
    env.reset(task)
    env.step(f"search[{env.goal()}]")
    results = [a for a in env.admissible_actions() if a not in ("click[back to search]", "click[next >]")]
    if not results:
        return False, 0.0
    env.step(results[0])
    if options:
        want = set(_TOKEN.findall(env.goal().lower()))
        for values in env.shop.products[env.page.asin].options.values():  # the groups the item page shows
            match = [v for v in values if set(_TOKEN.findall(v)) <= want]
            if match:
                env.step(f"click[{match[0]}]")
    r = env.step("click[buy now]")
    return bool(r.won), float(r.reward)


def _row(name: str, mode: str, outcomes: list[tuple[bool, float]], steps: Optional[float], dt: float) -> dict:
    n = len(outcomes)
    return {"policy": name, "search": mode, "episodes": n, "success": sum(w for w, _ in outcomes) / n,
            "score": 100.0 * sum(r for _, r in outcomes) / n, "steps": steps, "seconds": dt}


def _last_reward(env) -> float:
    obs = env._transcript[-1][1] if env._transcript else ""
    return float(obs.rsplit("[SEP]", 1)[-1]) if obs.startswith("Thank you") else 0.0


def policy_rows(cfg: EnvConfig, cache: Path, n: int) -> list[dict]:
    """Every policy on the first ``n`` test goals, in the same catalogue and split (one process)."""
    rows = []
    for mode in ("free", "choice"):
        family = make_family(replace(cfg, webshop_search=mode), cache)
        env, tasks = family.make(), family.tasks("test")[:n]
        if mode == "free":
            for name, opts in (("rule: search + first result + buy", False), ("rule: + options by words", True)):
                t0 = time.perf_counter()
                out = [rule_episode(env, t, opts) for t in tasks]
                rows.append(_row(name, mode, out, None, time.perf_counter() - t0))
        for s in strategies("webshop"):
            t0, out, steps = time.perf_counter(), [], 0
            for t in tasks:
                p = play(env, t, s.name, require_admissible=(mode == "choice"), max_steps=cfg.max_steps)
                out.append((p.won, _last_reward(env)))
                steps += len(p.actions)
            rows.append(_row(f"teacher: {s.name}", mode, out, steps / len(tasks), time.perf_counter() - t0))
        t0 = time.perf_counter()
        res = [play_expert(env, t) for t in tasks]
        rows.append(_row("privileged ASIN expert", mode, [(r["won"], r["reward"]) for r in res],
                         sum(r["steps"] for r in res) / len(res), time.perf_counter() - t0))
    return rows


def print_policies(rows: list[dict]) -> None:
    print(f"\npolicies on {rows[0]['episodes']} test goals (success = reward 1.0; score = mean reward x 100)")
    print(f"{'policy':<36}{'search':>8}{'success':>9}{'score':>8}{'steps':>7}")
    for r in rows:
        steps = "-" if r["steps"] is None else f"{r['steps']:.1f}"
        print(f"{r['policy']:<36}{r['search']:>8}{r['success']:>9.3f}{r['score']:>8.1f}{steps:>7}")


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
    ap.add_argument("--only", choices=("all", "policies"), default="all", help="policies: the policy table alone")
    args = ap.parse_args()
    data = Path(args.data_dir)
    cfg = EnvConfig(name=EnvName.webshop, max_steps=15)
    cfg.webshop_products = str(data / "webshop" / "minimal_documents_1000.jsonl")
    cfg.webshop_instructions = str(data / "webshop" / "items_ins_v2_1000.json")
    with tempfile.TemporaryDirectory() as d:
        policies = policy_rows(cfg, Path(d) / "cache", args.episodes)
    print_policies(policies)
    if args.only == "policies":
        print(json.dumps({"policies": policies}))
        return
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
    print(json.dumps({"env": steps, "search": search, "scale": scale, "policies": policies}))


if __name__ == "__main__":
    from pipeline.errors import named_errors  # one named line, not a traceback (TALENTRL_TRACEBACK=1 shows it)

    raise SystemExit(named_errors("bench_webshop")(main)())
