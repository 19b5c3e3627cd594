"""What a library folder may be trusted with: its state, its commit lock, and a damaged folder moved aside.

A local library is a folder of LanceDB tables (``skills``, ``talents``, ``labels``) and the ``versions`` manifest
that maps each library version to their table versions (``store.py``). Its *state* is one of:

* ``empty``: no table folder yet (version 0);
* ``committed``: the manifest holds a committed version (whether each table can be read is checked on load);
* ``interrupted``: tables but no committed manifest, and the marker a first commit writes before it creates any
  table (``.first-commit``) is still there: that commit was killed, and what it left was never visible to a reader;
* ``damaged``: tables but no committed manifest and no marker: the version history was removed or lost. Nothing
  may be deleted: readers refuse by name (``LibraryDamagedError``), and a writer moves the folder's contents aside
  to ``<uri>.damaged-<UTC time>`` before it starts a new history (``move_aside``) — as LanceDB never drops a table
  version it did not write itself, and as ``workdir`` moves a run of another job aside.

Commits to a local library hold an inter-process lock (``<uri>/.commit.lock``, fcntl: released by the OS when its
process dies) and record who holds it (``.commit.lock.holder``), so a waiting writer says whom it waits for.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

MANIFEST = "versions"
LOCK_FILE = ".commit.lock"
HOLDER_FILE = ".commit.lock.holder"
FIRST_COMMIT = ".first-commit"
_KEEP = {LOCK_FILE, HOLDER_FILE}
"Files that stay in the folder when its contents move aside (the lock being held while they move)."


class LibraryReadError(ValueError):
    """A library table that cannot be read (a damaged or half-copied LanceDB folder); the message names it."""


class LibraryDamagedError(LibraryReadError):
    """A library whose tables hold data but whose version history is gone; nothing was changed."""


class LibraryLockedError(TimeoutError):
    """Another process held the library's commit lock for longer than the wait; the message names it."""


def is_local(uri: str | os.PathLike) -> bool:
    return "://" not in str(uri)


def uncommitted(uri: str | os.PathLike, name: str) -> bool:
    """True for a local table folder that holds no committed version (data files, no ``_versions/*.manifest``)."""
    if not is_local(uri):
        return False
    folder = Path(uri) / f"{name}.lance"
    return folder.is_dir() and not any((folder / "_versions").glob("*.manifest"))


def table_folders(uri: str | os.PathLike) -> list[Path]:
    root = Path(uri)
    return sorted(p for p in root.glob("*.lance") if p.is_dir()) if is_local(uri) and root.is_dir() else []


def state(uri: str | os.PathLike) -> str:
    """``empty``, ``committed``, ``interrupted`` or ``damaged`` (module docstring); object stores: ``committed``."""
    if not is_local(uri):
        return "committed"
    folders = table_folders(uri)
    if not folders:
        return "empty"
    if (Path(uri) / f"{MANIFEST}.lance").is_dir() and not uncommitted(uri, MANIFEST):
        return "committed"
    return "interrupted" if (Path(uri) / FIRST_COMMIT).exists() else "damaged"


def damage_message(uri: str | os.PathLike) -> str:
    manifest = Path(uri) / f"{MANIFEST}.lance"
    what = (f"{manifest} holds no committed version" if manifest.is_dir() else f"{manifest} is missing")
    tables = ", ".join(p.stem for p in table_folders(uri) if p.stem != MANIFEST) or "none"
    return (f"{uri}: the library's version history is gone ({what}) while its tables ({tables}) hold data: the "
            f"library is damaged and was left as it is. Restore it (`dvc checkout artifacts/library`, or a backup), "
            f"or re-run the distill stage, which moves it aside to {uri}.damaged-<UTC time> and starts at version 1")


def move_aside(uri: str | os.PathLike, reason: str) -> Path:
    """Move every entry of the library folder (but its lock files) into ``<uri>.damaged-<UTC time>``; one warning
    line names both folders and why. Returns the new folder."""
    root = Path(uri)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    dest, n = root.with_name(f"{root.name}.damaged-{stamp}"), 1
    while dest.exists():
        dest, n = root.with_name(f"{root.name}.damaged-{stamp}-{n}"), n + 1
    dest.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name not in _KEEP:
            os.replace(entry, dest / entry.name)
    log.warning("library %s: %s; moved its contents to %s (nothing deleted) and starting a new history at version 1",
                root, reason, dest)
    return dest


@contextlib.contextmanager
def first_commit(uri: str | os.PathLike, first: bool):
    """Mark a first commit in progress (``FIRST_COMMIT``) so that a kill half-way is told from damage."""
    marker = Path(uri) / FIRST_COMMIT
    if first and is_local(uri):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{os.getpid()}\n")
    yield
    marker.unlink(missing_ok=True)


def holder(uri: str | os.PathLike) -> str:
    """Who holds the commit lock, as recorded by them (``pid N on host, since …: command``)."""
    try:
        h = json.loads((Path(uri) / HOLDER_FILE).read_text())
        return f"pid {h['pid']} on {h['host']}, since {h['since']}: {h['command']}"
    except (OSError, ValueError, KeyError):
        return "a process that recorded no details"


@contextlib.contextmanager
def commit_lock(uri: str | os.PathLike, timeout_s: float = 600.0):
    """An inter-process lock on a local library's commits (a no-op for object-store URIs, whose LanceDB commits are
    atomic per table but not across our manifest). A held lock is announced once with its holder; a wait past
    ``timeout_s`` raises ``LibraryLockedError`` naming the holder and what to do."""
    if not is_local(uri):
        yield
        return
    from filelock import FileLock, Timeout

    Path(uri).mkdir(parents=True, exist_ok=True)
    path = Path(uri) / LOCK_FILE
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("library %s: waiting up to %.0f s for its commit lock %s, held by %s", uri, timeout_s, path,
                    holder(uri))
        try:
            lock.acquire(timeout=timeout_s)
        except Timeout:
            raise LibraryLockedError(
                f"{path}: the library's commit lock is still held after {timeout_s:.0f} s by {holder(uri)}; let that "
                f"run finish or stop it (the lock of a process that has exited is released by the system)") from None
    try:
        (Path(uri) / HOLDER_FILE).write_text(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)[:200]}))
        yield
    finally:
        (Path(uri) / HOLDER_FILE).unlink(missing_ok=True)
        lock.release()
