"""Fetch one benchmark data file from its public source at its pinned revision, verified by sha256 (``make data``).

``file`` entries are raw downloads, ``archive`` entries a ``git archive <rev> <folder> | xz -9e``, ``derived`` ones
their own pinned sources converted by ``benchdata_derive`` exactly as the manifest's ``how`` describes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from .benchdata import RAW_URL, DataCorrupt, Entry, sha256
from .benchdata_derive import derive

GIT_URL = "https://github.com/{repo}.git"


def fetch(e: Entry, root: Path, raw_url: str = RAW_URL, git_url: str = GIT_URL, timeout: float = 60) -> Path:
    """Fetch one entry from its public source into ``root`` (a derived one: its sources, then converted), verified
    against the manifest's sha256; written atomically."""
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
            derive(e, part, raw_url=raw_url, timeout=timeout)
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
