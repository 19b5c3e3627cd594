"""The benchmark data the pipeline reads: a manifest of every file (public source, revision, path, checksum,
licence) and checks; fetching from the public sources is ``benchdata_fetch``.

``data/manifest.yaml`` (in the repository) lists each file under the data folder (``data_dir``; default
``$TALENTRL_DATA_DIR`` or ``../shared/data``). ``python -m pipeline.data`` (``make data``) verifies each file's
sha256 there and fetches what is missing from its public source at the pinned revision, when the machine is online:

* ``file`` entries: the file at ``<repo>@<revision>:<path>`` (raw download);
* ``archive`` entries: ``git archive <revision> <folder> | xz -9e`` of the source repository (how the mirror built it);
* ``derived`` entries (converted from another format): their ``sources`` (each pinned by sha256) are fetched like
  ``file`` entries and converted by ``benchdata_derive`` exactly as the manifest's ``how`` describes.

``select`` picks the entries one run needs (a folder, a file, or ``tokenizer``: what the tiny model's tokenizer
is trained on); ``require`` checks them present with their checksums before anything reads them.

A reader that misses a file raises ``DataMissing``: the dataset, the path it expected, its source and ``make data``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import yaml

MANIFEST = Path(__file__).resolve().parent.parent / "data" / "manifest.yaml"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{revision}/{path}"
DEFAULT_DIR = "../shared/data"


class DataMissing(FileNotFoundError):
    """A benchmark data file is absent; the message names it, its source and ``make data``."""


class DataCorrupt(ValueError):
    """A data file's checksum differs from the manifest."""


@dataclass(frozen=True)
class Source:
    """One public file a derived entry is converted from, at the entry's repository and revision."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the data folder
    kind: str  # file | archive | derived
    repo: str
    revision: str
    source_path: str
    sha256: str
    size: int
    licence: str
    how: str = ""
    sources: tuple[Source, ...] = field(default=())

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.revision[:12]}:{self.source_path}"


def data_dir(value: Optional[str | os.PathLike] = None) -> Path:
    """The benchmark data folder: ``value``, else ``$TALENTRL_DATA_DIR``, else ``../shared/data`` (what
    ``conf/config.yaml``'s ``data_dir`` composes to)."""
    return Path(value or os.environ.get("TALENTRL_DATA_DIR") or DEFAULT_DIR)


def data_path(value: str | os.PathLike, root: Optional[str | os.PathLike] = None) -> Path:
    """A data-file setting (``env.corpus``, ``env.alfworld_archive``, ...) as a path. In a config Hydra composed,
    OmegaConf has already filled ``${data_dir}``; a config built in code (``EnvConfig()`` in a script or a test) gets
    the same folder here (``data_dir(root)``). Any other unresolved ``${...}`` raises ``ValueError``.

    >>> str(data_path("${data_dir}/qa/x.jsonl", "/d")), str(data_path("/abs/x.json", "/d"))
    ('/d/qa/x.jsonl', '/abs/x.json')
    """
    value = str(value)
    if "${data_dir}" in value:
        value = value.replace("${data_dir}", str(data_dir(root)))
    if "${" in value:
        raise ValueError(f"{value!r}: unresolved interpolation (compose the config with Hydra, or give a path)")
    return Path(value).expanduser()


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    rows = yaml.safe_load(path.read_text())["files"]
    return [Entry(**{**r, "sources": tuple(Source(**x) for x in r.get("sources") or ())}) for r in rows]


TOKENIZER = "tokenizer"


def tokenizer_entries(entries: Optional[Sequence[Entry]] = None) -> list[Entry]:
    """The files the tiny model's tokenizer is trained on, in the order it reads them: ALFWorld's grammar, the
    trajectories (``*.jsonl`` then ``*.json``), then the QA questions (``qa/eval``, then ``qa/train``)."""
    by_path = {e.path: e for e in (load_manifest() if entries is None else entries)}

    def files(folder: str, suffix: str) -> list[str]:
        return sorted(p for p in by_path if p.startswith(folder) and "/" not in p[len(folder):] and p.endswith(suffix))

    order = ["alfworld/alfred.twl2", *files("trajectories/", ".jsonl"), *files("trajectories/", ".json"),
             *files("qa/eval/", ".jsonl"), *files("qa/train/", ".jsonl")]
    return [by_path[p] for p in order if p in by_path]


def select(entries: Sequence[Entry], names: Iterable[str]) -> list[Entry]:
    """The entries named: ``tokenizer``, a folder (``qa``, ``qa/eval``) or a file path; in manifest order.

    >>> [e.path for e in select(load_manifest(), ["qa/train"])]
    ['qa/train/stage_2.jsonl', 'qa/train/stage_1.jsonl']
    """
    wanted: set[str] = set()
    for name in names:
        name = name.strip().strip("/")
        hits = ([e.path for e in tokenizer_entries(entries)] if name == TOKENIZER else
                [e.path for e in entries if e.path == name or e.path.startswith(name + "/")])
        if not hits:
            folders = sorted({e.path.split("/")[0] for e in entries})
            raise ValueError(f"no data file matches {name!r}: name {TOKENIZER!r}, a folder ({', '.join(folders)}, "
                             f"or deeper) or a file of data/manifest.yaml")
        wanted.update(hits)
    return [e for e in entries if e.path in wanted]


def require(root: Path, entries: Sequence[Entry], purpose: str) -> list[Path]:
    """The paths of ``entries`` under ``root``, each verified present with its manifest sha256; otherwise
    DataMissing (some absent) or DataCorrupt (all present, some with another checksum) naming every such file."""
    root = Path(root)
    state = status(root, entries)
    missing = [p for p, s in state.items() if s == "missing"]
    corrupt = [p for p, s in state.items() if s == "corrupt"]
    fix = ("Run `make data` (fetches and verifies the benchmark data) or set TALENTRL_DATA_DIR to a verified "
           "mirror")
    if entries and len(missing) == len(entries):
        raise DataMissing(f"data_dir={root} holds no benchmark data: none of the {len(entries)} files {purpose} reads "
                          f"is there. {fix}")
    if missing or corrupt:
        what = ([f"missing: {', '.join(missing)}"] if missing else []) + (
            [f"wrong sha256 (not the manifest's): {', '.join(corrupt)}"] if corrupt else [])
        err = DataMissing if missing else DataCorrupt
        raise err(f"data_dir={root}: {purpose} reads {len(entries)} files, "
                  f"{len(entries) - len(missing) - len(corrupt)} verified; {'; '.join(what)}. {fix}")
    return [root / e.path for e in entries]


def entry_for(rel: str, manifest: Optional[list[Entry]] = None) -> Optional[Entry]:
    rel = rel.replace(os.sep, "/").lstrip("./")
    try:
        entries = manifest if manifest is not None else load_manifest()
    except (OSError, yaml.YAMLError):
        return None
    return next((e for e in entries if e.path == rel), None)


def missing(path: Path, root: Optional[Path] = None) -> DataMissing:
    """The error for a data file that is not there, naming the dataset and how to get it."""
    path = Path(path)
    rel = None
    if root is not None:
        try:
            rel = path.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            rel = None
    e = entry_for(rel) if rel else None
    what = f"dataset {e.path} (from {e.source}, licence {e.licence})" if e else "data file"
    return DataMissing(f"{what} not found at {path}: run `make data` (fetches and verifies the benchmark data; "
                       f"set TALENTRL_DATA_DIR to use a mirror elsewhere)")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def status(root: Path, entries: Iterable[Entry]) -> dict[str, str]:
    """``{path: 'ok' | 'missing' | 'corrupt'}`` of each entry under ``root``."""
    out = {}
    for e in entries:
        p = root / e.path
        out[e.path] = "missing" if not p.is_file() else ("ok" if sha256(p) == e.sha256 else "corrupt")
    return out


