"""DVC's content hashes through DVC's own library (dvc-data), so Dagster data versions equal the md5s in dvc.lock.

A file's hash is the md5 of its bytes; a folder's is dvc-data's tree digest (``<md5>.dir``). Files that the
``.dvcignore`` of the DVC repository holding the path excludes are skipped, as ``dvc commit`` skips them.
tests/test_pipeline.py checks the result against ``dvc add``/``dvc commit``'s lock entries.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path


IGNORED = ("__pycache__", "*.pyc", ".ipynb_checkpoints")
"What the repository's .dvcignore excludes (documentation; the file itself is what counts)."


@functools.lru_cache(maxsize=1)
def _fs_and_odb():
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    return fs, HashFileDB(fs, tempfile.mkdtemp(prefix="talentrl-dvc-hash-"))  # dry runs never write to it


def _repo_root(path: Path) -> Path:
    """The DVC repository holding ``path`` (its ``.dvcignore`` applies), else the path's own folder."""
    path = path.resolve()
    return next((p for p in [path, *path.parents] if (p / ".dvc").is_dir()), path if path.is_dir() else path.parent)


def _build(path: Path) -> str:
    from dvc.ignore import DvcIgnoreFilter
    from dvc_data.hashfile.build import build

    fs, odb = _fs_and_odb()
    ignore = DvcIgnoreFilter(fs, str(_repo_root(path)))
    _, _, obj = build(odb, str(path.resolve()), fs, "md5", dry_run=True, ignore=ignore)
    return obj.hash_info.value


def file_md5(path: str | os.PathLike) -> str:
    from dvc_data.hashfile.hash import file_md5 as md5

    return md5(str(path))


def dir_md5(path: str | os.PathLike) -> str:
    """DVC's hash of a folder: ``<md5 of the tree>.dir``."""
    return _build(Path(path))


def dvc_md5(path: str | os.PathLike) -> str:
    """DVC's hash of a file or folder (what ``dvc.lock`` records as ``md5`` for an out)."""
    p = Path(path)
    if p.is_dir():
        return dir_md5(p)
    if p.is_file():
        return file_md5(p)
    raise FileNotFoundError(f"{p}: no such file or folder to hash")
