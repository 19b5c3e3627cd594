"""Resumable evaluation: every finished chunk of a system's episodes is kept, so a killed evaluation continues.

An evaluation of several systems on 500 WebShop goals or 274 ALFWorld games runs for hours on a CPU. The runner
plays each (panel, system, attempt) in chunks of ``CHUNK`` tasks and writes each finished chunk atomically to
``<eval>.work/<panel>/<system>/k<attempt>-<first task>.json`` with its episode rows, its cost and a key of everything
the chunk's results depend on (the system, its checkpoint by content, its library version, the rollout settings and
the chunk's tasks). A re-run reads every chunk whose key matches and plays only the others; a chunk whose key differs
(a retrained checkpoint, another panel) is played again and overwritten. The folder is removed once the evaluation's
own files are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Optional

from ..io import read_json, write_json
from ..workdir import work_dir

CHUNK = 64
"Tasks per chunk: what a killed evaluation can lose at most, per process (a multiple of the rollout batch, 16)."


def chunk_key(**parts: Any) -> str:
    """A stable digest of what a chunk's results depend on.

    >>> chunk_key(system="a", tasks=["t1", "t2"]) == chunk_key(tasks=["t1", "t2"], system="a")
    True
    """
    def plain(x):
        return asdict(x) if is_dataclass(x) else str(x)

    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=plain).encode()).hexdigest()


class ChunkCache:
    """Finished evaluation chunks under ``<eval>.work`` (see the module docstring)."""

    def __init__(self, eval_dir: str | Path):
        self.root = work_dir(Path(eval_dir))
        self.read = 0
        "Chunks taken from the cache in this run."

    def _path(self, panel: str, system: str, k: int, start: int) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", system)
        return self.root / panel / safe / f"k{k}-{start:06d}.json"

    def get(self, panel: str, system: str, k: int, start: int, key: str) -> Optional[dict]:
        """``{"rows": [...], "perf": {...}}`` of a finished chunk with this key, else None."""
        path = self._path(panel, system, k, start)
        if not path.is_file():
            return None
        try:
            got = read_json(path)
        except Exception:  # a cache entry that cannot be read is played again
            return None
        if got.get("key") != key:
            return None
        self.read += 1
        return got

    def put(self, panel: str, system: str, k: int, start: int, key: str, rows: list[dict], perf: dict) -> None:
        write_json(self._path(panel, system, k, start), {"key": key, "rows": rows, "perf": perf})

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def drop(self, panel: str, system: str) -> None:
        """Remove one (panel, system)'s chunks, and the folders left empty; another's stay (a call running beside
        this one on the same folder may still need them)."""
        folder = self._path(panel, system, 0, 0).parent
        shutil.rmtree(folder, ignore_errors=True)
        for parent in (folder.parent, self.root):
            with contextlib.suppress(OSError):  # removed only when empty: other chunks, or a call writing one, keep it
                parent.rmdir()


def add_perf(total: Optional[dict], part: dict) -> dict:
    """Costs of two runs of a system summed (seconds, steps, tokens).

    >>> add_perf({"seconds": 1.0, "policy_steps": 2}, {"seconds": 0.5, "policy_steps": 3})
    {'seconds': 1.5, 'policy_steps': 5}
    """
    if total is None:
        return dict(part)
    return {k: round(total.get(k, 0) + v, 1) if isinstance(v, float) else total.get(k, 0) + v for k, v in part.items()}
