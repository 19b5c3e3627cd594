"""WebShop's small setting: the 1,000-product catalogue, its synthetic goals, a leak-free split, and search.

Follows princeton-nlp/WebShop (``web_agent_site/engine/engine.py`` and ``goal.py``, MIT) for what the data
means; the code is ours:

- products come already processed (``minimal_documents_1000.jsonl``: prices are float lists, options are
  lower-cased value lists), so nothing here re-parses price strings;
- a product's displayed price is its single price, or a uniform draw between its first two prices;
- synthetic goals: every option combination of every product with an instruction (415 products, 6,910
  goals), instruction text ``<instruction> with <name>: <value>, and ... , and price lower than X dollars``
  where X is the larger of two draws from the first four multiples of 10 above the price;
- every random draw comes from ``random.Random`` seeded by ``(seed, asin)``, so a goal does not depend on
  the order in which products are read, the process, or the worker;
- the split is a seeded shuffle of the canonical goal order: the first ``n_test`` goals are ``test``, the
  rest ``train``. It is a function of the data and the seed only (WebShop's own split shuffles with seed 233
  too; ports that re-shuffle per worker leak test goals into training). As in WebShop, one product's option
  combinations can fall on both sides: the split is by goal, not by product.

Search is BM25 over each document's ``contents`` (title, description, first bullet point, options) with
pyserini's parameters (k1 = 0.9, b = 0.4, Lucene's idf, English stop words, Snowball English stemmer) via the
``bm25s`` library. ``backend: memory`` keeps the index in RAM; ``backend: mmap`` saves it under the cache
directory once and memory-maps it, which is how a 1.18M-product catalogue is served without loading it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ...benchdata import missing
from ...io import iter_jsonl, read_json

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
"WebShop's price bounds (10 … 990 dollars)."
NO_PRICE_BOUND = 1_000_000.0
"The bound of a goal whose product is too expensive for two bounds above it (no price text)."
REQUIRED_FIELDS = ("asin", "name", "Title", "Description", "BulletPoints", "Attributes", "options", "pricing",
                   "query", "category", "product_category", "Price")


class CatalogueError(ValueError):
    """A catalogue or instruction file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Product:
    asin: str
    name: str
    title: str
    description: str
    bullets: tuple[str, ...]
    attributes: tuple[str, ...]
    options: dict[str, list[str]]
    pricing: tuple[float, ...]
    price_tag: str
    query: str
    category: str
    product_category: str
    contents: str
    "The text the search index holds (WebShop's ``contents``)."


def _norm(text: Any) -> str:
    """Lower-cased, whitespace collapsed (the catalogue has non-breaking spaces inside option values)."""
    return " ".join(str(text).lower().split())


def _product(row: dict, where: str) -> Product:
    p = row.get("product")
    if not isinstance(p, dict):
        raise CatalogueError(f"{where}: no 'product' object")
    missing = [k for k in REQUIRED_FIELDS if k not in p]
    if missing:
        raise CatalogueError(f"{where}: product {p.get('asin', '?')!r} lacks {missing}")
    options = p["options"] or {}
    if not isinstance(options, dict) or not all(isinstance(v, list) for v in options.values()):
        raise CatalogueError(f"{where}: product {p['asin']!r} has options that are not name -> list of values")
    bullets = p["BulletPoints"]
    bullets = bullets if isinstance(bullets, list) else [str(bullets)]
    return Product(
        asin=str(p["asin"]), name=str(p["name"]), title=str(p["Title"]), description=str(p["Description"] or ""),
        bullets=tuple(str(b) for b in bullets), attributes=tuple(str(a) for a in p["Attributes"]),
        options={_norm(k): [_norm(v) for v in vals] for k, vals in options.items()},
        pricing=tuple(float(x) for x in (p["pricing"] or [])), price_tag=str(p["Price"]),
        query=str(p["query"]).lower().strip(), category=str(p["category"]), product_category=str(p["product_category"]),
        contents=str(row.get("contents") or ""),
    )


def load_catalogue(path: str | Path) -> dict[str, Product]:
    """ASIN → product, in file order. A malformed line raises ``CatalogueError`` naming ``path:line``."""
    path = Path(path)
    if not path.exists():
        raise missing(path, path.parents[1])
    out: dict[str, Product] = {}
    for lineno, row in iter_jsonl(path, CatalogueError):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise CatalogueError(f"{where}: a line must be a JSON object")
        prod = _product(row, where)
        out[prod.asin] = prod
    if not out:
        raise CatalogueError(f"{path}: no products")
    return out


def load_instructions(path: str | Path) -> dict[str, dict]:
    """ASIN → {instruction, instruction_attributes, attributes} (WebShop's ``items_ins_v2``)."""
    path = Path(path)
    if not path.exists():
        raise missing(path, path.parents[1])
    try:
        data = read_json(path)
    except ValueError as e:
        raise CatalogueError(str(e)) from e
    if not isinstance(data, dict):
        raise CatalogueError(f"{path}: expected a JSON object ASIN -> instruction record")
    return data


def displayed_price(product: Product, seed: int) -> float:
    """The price the shop shows and charges: single price, else a uniform draw between the first two."""
    if not product.pricing:
        return 100.0
    if len(product.pricing) == 1:
        return product.pricing[0]
    return random.Random(f"price|{seed}|{product.asin}").uniform(*product.pricing[:2])


def price_bound(price: float, asin: str, seed: int) -> tuple[float, str]:
    """(upper bound, instruction text) of a product's goals: the larger of two of the 4 bounds above its price."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_BOUND, ""
    upper = max(random.Random(f"bound|{seed}|{asin}").sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(products: dict[str, Product], instructions: dict[str, dict], seed: int) -> list[dict]:
    """Every option combination of every product with an instruction, in canonical (ASIN, option) order."""
    goals = []
    for asin in sorted(products):
        ins = instructions.get(asin) or {}
        if not ins.get("instruction"):
            continue
        prod = products[asin]
        attributes = list(ins.get("instruction_attributes") or [])
        if not attributes:
            raise CatalogueError(f"instructions: {asin} has an instruction but no instruction_attributes")
        price = displayed_price(prod, seed)
        upper, price_text = price_bound(price, asin, seed)
        names = sorted(prod.options)
        for combo in itertools.product(*(prod.options[n] for n in names)):
            opts = dict(zip(names, combo))
            option_text = ", and ".join(f"{k}: {v}" for k, v in opts.items())
            base = ins["instruction"].strip().strip(".")
            goals.append({
                "asin": asin, "category": prod.category, "query": prod.query, "name": prod.name,
                "product_category": prod.product_category, "attributes": attributes, "price_upper": upper,
                "goal_options": opts, "base_instruction": base,
                "instruction_text": base + (" with " + option_text if option_text else "") + price_text,
            })
    return goals


def goal_key(goal: dict) -> str:
    """A goal's stable key: ASIN and its options (``B0…|color=red|size=m``)."""
    return "|".join([goal["asin"], *(f"{k}={v}" for k, v in sorted(goal["goal_options"].items()))])


def split_goals(goals: list[dict], seed: int, n_test: int, n_dev: int = 0) -> dict[str, list[dict]]:
    """{test, dev, train}: a seeded shuffle of the canonical order cut in that order (as WebShop: test, eval,
    train); disjoint by construction, and ``train`` without a dev split is the same as before it existed."""
    order = sorted(goals, key=goal_key)
    rng = random.Random(f"split|{seed}")
    rng.shuffle(order)
    return {"test": order[:n_test], "dev": order[n_test:n_test + n_dev], "train": order[n_test + n_dev:]}


def catalogue_fingerprint(path: str | Path) -> str:
    """sha256 of a catalogue file (names a saved index so a changed catalogue never reuses it)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


class SearchIndex:
    """BM25 over product ``contents`` (bm25s, Lucene scoring, k1 0.9, b 0.4, English stop words and stemmer).

    ``backend``: ``memory`` (build in RAM) or ``mmap`` (build once, save under ``index_dir``, memory-map).
    Ties are broken by catalogue order, so a ranking is deterministic.
    """

    K1, B = 0.9, 0.4

    def __init__(self, products: dict[str, Product], backend: str = "memory", index_dir: Optional[Path] = None):
        import logging

        import bm25s
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)

        if backend not in ("memory", "mmap"):
            raise ValueError(f"env.webshop_index={backend!r}: choose memory or mmap")
        self.asins = list(products)
        self._stemmer = Stemmer.Stemmer("english")
        self._bm25s = bm25s
        if backend == "mmap" and index_dir is not None and (index_dir / "params.index.json").exists():
            self.retriever = bm25s.BM25.load(str(index_dir), mmap=True)
            return
        corpus = [products[a].contents or products[a].title.lower() for a in self.asins]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self.retriever = bm25s.BM25(method="lucene", k1=self.K1, b=self.B)
        self.retriever.index(tokens, show_progress=False)
        if backend == "mmap" and index_dir is not None:
            from ...io import atomic_dir

            with atomic_dir(index_dir) as tmp:
                self.retriever.save(str(tmp))
            self.retriever = bm25s.BM25.load(str(index_dir), mmap=True)

    def search(self, query: str, k: int = 50) -> list[str]:
        """The ASINs of the ``k`` best products for ``query`` (fewer when fewer match any query term)."""
        toks = self._bm25s.tokenize([query.lower()], stopwords="en", stemmer=self._stemmer, show_progress=False,
                                    return_ids=False)[0]
        vocab = self.retriever.vocab_dict
        ids = [vocab[t] for t in toks if t in vocab]
        if not ids:
            return []
        scores = np.asarray(self.retriever.get_scores(ids))
        pos = np.flatnonzero(scores > 0)
        if len(pos) > k:  # keep every document tied with the k-th score, then order exactly
            kth = np.partition(scores[pos], len(pos) - k)[len(pos) - k]
            pos = pos[scores[pos] >= kth]
        ranked = pos[np.lexsort((pos, -scores[pos]))][:k]
        return [self.asins[i] for i in ranked]


def describe(goal: dict[str, Any]) -> str:
    """One line naming a goal (logs, errors)."""
    return f"{goal_key(goal)}: {goal['instruction_text']}"
