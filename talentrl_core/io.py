"""Atomic writes: every file the pipeline produces appears whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


_UMASK_LOCK = threading.Lock()


def process_umask() -> int:
    """This process's umask, read without changing it where the OS says it (Linux ``/proc/self/status``, ``Umask:``
    line); elsewhere set and restored at once under a lock (``os.umask`` has no read-only form, and a thread creating
    a file between the two calls would get the wrong mode: the lock keeps our own readers apart).

    >>> 0 <= process_umask() <= 0o777
    True
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        old = os.umask(0o077)
        os.umask(old)
    return old


def as_created(path: str | os.PathLike) -> None:
    """Give a staged file or folder the mode a plain ``open()``/``mkdir`` would have given it: ``0666 & ~umask`` for
    a file (``0777 & ~umask`` when its writer made it executable), ``0777 & ~umask`` for a folder. ``mkstemp`` and
    ``mkdtemp`` create theirs private (``0600``/``0700``), which a rename would carry onto the output and leave it
    unreadable to the group (a colleague, a serving process)."""
    _as_created(path, process_umask())


def _as_created(path: str | os.PathLike, umask: int) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return
    full = 0o777 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o100 else 0o666
    if stat.S_IMODE(st.st_mode) != full & ~umask:
        os.chmod(path, full & ~umask)


def as_created_tree(root: str | os.PathLike) -> None:
    """``as_created`` for ``root`` and everything below it: a staged output folder is whole ours, and some writers
    inside it make private files of their own (safetensors 0.8 writes ``model.safetensors`` ``0600``)."""
    umask = process_umask()
    for folder, dirs, files in os.walk(root):
        for name in files + dirs:
            _as_created(os.path.join(folder, name), umask)
    _as_created(root, umask)


def _is_special(path: Path) -> bool:
    """A device path (``/dev/stdout`` even when the shell points it at a file), a ``/proc/self/fd`` link, or a
    pipe, socket or terminal."""
    if path.absolute().parts[1:2] in (("dev",), ("proc",)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path`` (same filesystem), with the mode a
    plain ``open()`` would have given it (``as_created``: ``0644`` under umask ``022``), not ``mkstemp``'s ``0600``.

    A ``path`` that is not a regular file (``/dev/stdout``, a pipe, a terminal) is written through instead: renaming
    onto it would replace the device link with a file."""
    path = Path(path)
    if _is_special(path):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d) / path.name
            yield tmp
            with open(path, "ab") as out, open(tmp, "rb") as src:  # append: never truncate what a stream holds
                shutil.copyfileobj(src, out)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        as_created(tmp_path)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; on success swap it in place of ``path``, with the modes a plain
    ``mkdir``/``open()`` would have given it and everything in it (``as_created_tree``: ``0755``/``0644`` under umask
    ``022``), not ``mkdtemp``'s ``0700`` or a library's private ``0600``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        as_created_tree(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_orphans(path: str | os.PathLike) -> list[Path]:
    """Tidy what an ``atomic_dir``/``atomic_path`` write into ``path`` killed mid-way left beside it: its
    ``.<name>.*.tmp`` staging copy is removed; a ``.<name>.old`` is put back when ``path`` itself is missing (the
    kill fell between the two renames), else removed. Returns what was removed."""
    path = Path(path)
    old = path.with_name(f".{path.name}.old")
    if old.exists() and not path.exists():
        os.replace(old, path)
    found = list(path.parent.glob(f".{path.name}.*.tmp")) + ([old] if old.exists() else [])
    for p in found:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return found


def remove_stale_staging(root: str | os.PathLike, older_than_s: float = 0.0) -> list[Path]:
    """Remove the ``.<name>.*.tmp`` staging copies that killed writes (``atomic_path``, ``atomic_dir``, game
    generation) left anywhere under ``root``, when older than ``older_than_s`` (a cache other processes write into
    keeps their live ones). Returns what was removed; a staging copy holds nothing that was ever complete."""
    import time

    root, now, found = Path(root), time.time(), []
    if not root.is_dir():
        return found
    for p in root.rglob(".*.tmp"):
        try:
            if now - p.lstat().st_mtime >= older_than_s:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                found.append(p)
        except FileNotFoundError:  # removed meanwhile (by its writer or with its parent)
            continue
    return found


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON; a corrupt file raises ValueError naming the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e


_DISK_FULL_MARKERS = ("No space left on device", "file write failed", "inline_container.cc", "Disk quota exceeded",
                      "StorageFull", "QuotaExceeded")
# How a full disk reads in the errors of torch's zip writer and of safetensors (``SafetensorError: Error while
# serializing: IoError(Os { code: 28, kind: StorageFull, ... })``), which are not ``OSError``.""


def is_disk_full(e: BaseException) -> bool:
    """True for an error that says the disk (or quota) is full, whatever library raised it.

    >>> is_disk_full(OSError(28, "No space left on device")), is_disk_full(ValueError("bad value"))
    (True, False)
    """
    import errno

    return getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(m in str(e) for m in _DISK_FULL_MARKERS)


@contextmanager
def disk_full_named(path: str | os.PathLike, what: str = "writing") -> Iterator[None]:
    """Report a full disk as a full disk: torch's ``enforce fail at inline_container.cc``, safetensors'
    ``SafetensorError`` and friends become an ``OSError(ENOSPC)`` naming ``path`` and the space left on its
    filesystem. Other errors pass through untouched."""
    import errno

    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised unless it says the disk is full
        if not is_disk_full(e):
            raise
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free / 2**20
        raise OSError(errno.ENOSPC, f"disk full while {what} {path} ({free:.0f} MiB free on its filesystem): "
                                    f"free space and re-run (the run resumes from its last complete checkpoint)") from e


def iter_jsonl(path: str | os.PathLike, error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, row) for each non-blank JSONL line of ``path`` (gzipped when it ends in ``.gz``, as
    ``docs/results`` commits records and episodes); a malformed line raises ``error`` naming file:line."""
    import gzip

    path = Path(path)
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{path}:{lineno}: not valid JSON ({e})") from e
