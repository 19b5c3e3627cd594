"""Retrieval over HTTP: ``HttpRetriever`` (a client of Search-R1's ``/retrieve`` contract), ``make_app`` (a FastAPI
app serving it), ``build_retriever`` (``env.retriever``: bm25 / dense / http) and the CLI (see ``retrieval``)::

    python -m talentrl_core.envs.qa.serving --serve --corpus ../shared/data/qa/corpus/flashrag_sample_data.jsonl --port 8000
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Iterable, Optional

from pydantic import BaseModel

from .retrieval import DEFAULT_EMBEDDER, BM25Retriever, DenseRetriever, Passage, Retriever, format_passages

# ------------------------------------------------------------------------------------------------ HTTP


class RetrievalServerError(RuntimeError):
    """The /retrieve server failed or answered outside the contract."""


class HttpRetriever:
    """Client of a Search-R1 ``/retrieve`` server (ours from ``make_app``, or Search-R1's own)."""

    def __init__(self, url: str, timeout_s: float = 30.0, attempts: int = 3):
        import httpx

        self.url = url
        self.attempts = max(1, attempts)
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)

    def search(self, queries: list[str], topk: int) -> list[list[Passage]]:
        import httpx
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        if not queries:
            return []
        payload = {"queries": list(queries), "topk": topk, "return_scores": True}
        # Retry only transport failures (connection refused while the server starts, a dropped socket);
        # an HTTP error status or a malformed body is the server's answer and raises at once.
        for attempt in Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception_type(httpx.TransportError),
            reraise=True,
        ):
            with attempt:
                resp = self._client.post(self.url, json=payload)
        if resp.status_code != 200:
            raise RetrievalServerError(f"{self.url}: HTTP {resp.status_code}: {resp.text[:300]}")
        return parse_retrieve_response(resp.json(), len(queries), self.url)

    def close(self) -> None:
        self._client.close()


def parse_retrieve_response(body: Any, n_queries: int, where: str = "response") -> list[list[Passage]]:
    """Passages from a /retrieve body, with or without scores.

    >>> body = {"result": [[{"document": {"id": "7", "contents": '"T"\\nx'}, "score": 2.5}]]}
    >>> parse_retrieve_response(body, 1)
    [[Passage(id='7', contents='"T"\\nx', score=2.5)]]
    >>> parse_retrieve_response({"result": [[{"id": "7", "contents": "x"}]]}, 1)[0][0].score
    0.0
    """
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        raise RetrievalServerError(f"{where}: expected 'result' with {n_queries} lists, got {str(body)[:300]}")
    out = []
    for docs in result:
        if not isinstance(docs, list):
            raise RetrievalServerError(f"{where}: expected a list of documents per query, got {str(docs)[:200]}")
        row = []
        for item in docs:
            try:
                doc, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
                row.append(Passage(str(doc["id"]), doc["contents"], float(score)))
            except (KeyError, TypeError, ValueError) as e:
                raise RetrievalServerError(f"{where}: malformed document {str(item)[:200]}") from e
        out.append(row)
    return out


class QueryRequest(BaseModel):
    """Search-R1's /retrieve request body."""

    queries: list[str]
    topk: Optional[int] = None
    return_scores: bool = False


def make_app(retriever: Retriever, default_topk: int = 3, max_topk: int = 100):
    """A FastAPI app with Search-R1's ``POST /retrieve`` (and ``GET /health``)."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="TalentRL retrieval server")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/retrieve")
    def retrieve(req: QueryRequest) -> dict:
        k = default_topk if req.topk is None else req.topk
        if not 1 <= k <= max_topk:
            raise HTTPException(status_code=422, detail=f"topk must be in [1, {max_topk}], got {k}")
        hits = retriever.search(list(req.queries), k)
        if req.return_scores:
            return {"result": [[{"document": p.document(), "score": p.score} for p in ps] for ps in hits]}
        return {"result": [[p.document() for p in ps] for ps in hits]}

    return app


def build_retriever(kind: str, corpus: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                    url: str = "", embedder: str = DEFAULT_EMBEDDER) -> Retriever:
    """bm25 / dense over ``corpus``, or http to ``url``."""
    if kind == "bm25":
        return BM25Retriever.from_corpus(corpus)
    if kind == "dense":
        if cache_dir is None:
            raise ValueError("retriever=dense needs a cache_dir for its LanceDB table")
        return DenseRetriever.from_corpus(corpus, Path(cache_dir) / "qa_dense.lancedb", embedder=embedder)
    if kind == "http":
        if not url:
            raise ValueError("retriever=http needs env.retriever_url")
        return HttpRetriever(url)
    raise ValueError(f"retriever={kind!r}: choose bm25, dense or http")


def main(argv: Optional[Iterable[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m talentrl_core.envs.qa.serving", description=__doc__.split("\n")[0])
    ap.add_argument("--serve", action="store_true", help="run the /retrieve server")
    ap.add_argument("--corpus", required=True, help="passage corpus ({id, contents} JSONL, or a HippoRAG JSON corpus)")
    ap.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    ap.add_argument("--cache-dir", default="artifacts/cache", help="where the dense index is stored")
    ap.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--topk", type=int, default=3, help="default topk when a request gives none")
    ap.add_argument("--query", action="append", default=[], help="without --serve: print the top passages of a query")
    args = ap.parse_args(list(argv) if argv is not None else None)
    retriever = build_retriever(args.retriever, args.corpus, args.cache_dir, embedder=args.embedder)
    if args.serve:
        import uvicorn

        uvicorn.run(make_app(retriever, default_topk=args.topk), host=args.host, port=args.port, log_level="info")
    else:
        for q, ps in zip(args.query, retriever.search(args.query, args.topk)):
            print(f"## {q}\n{format_passages(ps)}\n")


if __name__ == "__main__":
    main()
