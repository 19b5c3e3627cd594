"""The benchmark data the pipeline reads: a manifest of every file (public source, revision, path, checksum,
licence), checks, and fetching from the public sources.

``data/manifest.yaml`` (in the repository) lists each file under the data folder (``data_dir``; default
``$TALENTRL_DATA_DIR`` or ``../shared/data``). ``python -m pipeline.data`` (``make data``) verifies each file's
sha256 there and fetches what is missing from its public source at the pinned revision, when the machine is online:

* ``file`` entries: the file at ``<repo>@<revision>:<path>`` (raw download);
* ``archive`` entries: ``git archive <revision> <folder> | xz -9e`` of the source repository (how the mirror built it);
* ``derived`` entries (converted from another format): no single public file; the manifest's ``how`` says what was
  done, and they come from a mirror only.

A reader that misses a file raises ``DataMissing``: the dataset, the path it expected, its source and ``make data``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import yaml

MANIFEST = Path(__file__).resolve().parent.parent / "data" / "manifest.yaml"
RAW_URL = "https://raw.githubusercontent.com/{repo}/{revision}/{path}"
GIT_URL = "https://github.com/{repo}.git"
DEFAULT_DIR = "../shared/data"


class DataMissing(FileNotFoundError):
    """A benchmark data file is absent; the message names it, its source and ``make data``."""


class DataCorrupt(ValueError):
    """A data file's checksum differs from the manifest."""


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

    @property
    def source(self) -> str:
        return f"{self.repo}@{self.revision[:12]}:{self.source_path}"


def data_dir(value: Optional[str] = None) -> Path:
    return Path(value or os.environ.get("TALENTRL_DATA_DIR") or DEFAULT_DIR)


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    rows = yaml.safe_load(path.read_text())["files"]
    return [Entry(**r) for r in rows]


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


def fetch(e: Entry, root: Path, raw_url: str = RAW_URL, git_url: str = GIT_URL, timeout: float = 60) -> Path:
    """Fetch one entry from its public source into ``root``, verified; written atomically."""
    dest = root / e.path
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        part = Path(tmp) / dest.name
        if e.kind == "file":
            url = raw_url.format(repo=e.repo, revision=e.revision, path=e.source_path)
            with urllib.request.urlopen(url, timeout=timeout) as r, open(part, "wb") as f:
                shutil.copyfileobj(r, f)
        elif e.kind == "archive":
            _git_archive(git_url.format(repo=e.repo), e.revision, e.source_path, Path(tmp) / "src", part)
        else:
            raise DataMissing(f"{e.path} is derived ({e.how}); it has no single public file: copy it from a mirror "
                              f"(TALENTRL_DATA_DIR) or redo: {e.how}")
        got = sha256(part)
        if got != e.sha256:
            raise DataCorrupt(f"{e.path}: fetched from {e.source} but its sha256 is {got}, the manifest says {e.sha256}")
        os.replace(part, dest)
    return dest


def _git_archive(url: str, revision: str, folder: str, work: Path, out: Path) -> None:
    run = lambda *a: subprocess.run(a, cwd=work, check=True, capture_output=True)  # noqa: E731
    work.mkdir()
    run("git", "init", "-q")
    run("git", "fetch", "-q", "--depth", "1", url, revision)
    with open(out, "wb") as f:
        archive = subprocess.Popen(["git", "archive", revision, folder.rstrip("/")], cwd=work, stdout=subprocess.PIPE)
        subprocess.run(["xz", "-9e", "-c"], stdin=archive.stdout, stdout=f, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {revision} {folder} failed in {url}")
