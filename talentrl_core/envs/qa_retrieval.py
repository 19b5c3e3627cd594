"""Old import path of the QA retrievers (tests/reliability imports it): see ``envs/qa/retrieval.py`` and
``envs/qa/serving.py``. ``python -m talentrl_core.envs.qa_retrieval --serve ...`` still runs the server CLI."""

from __future__ import annotations

from .qa.retrieval import *  # noqa: F401,F403
from .qa.retrieval import BM25Retriever, DenseRetriever, Passage, Retriever, load_corpus, load_embedder  # noqa: F401
from .qa.serving import (  # noqa: F401
    HttpRetriever,
    RetrievalServerError,
    build_retriever,
    main,
    make_app,
    parse_retrieve_response,
)

if __name__ == "__main__":
    main()
