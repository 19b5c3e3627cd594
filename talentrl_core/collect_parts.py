"""A long collection in parts: a killed run continues where it stopped and collects nothing twice (issue 39).

ALFWorld's 3,553 training games take hours under a strategy expert. The episodes of one collection run are cut, in
their fixed order, into parts of ``PART_EPISODES``; each part is written (atomically) to
``<trajectories>/.parts/<run_id>/part-<first>-<last>.parquet`` as soon as it is played. A re-run of the same
collection reads the parts that are there, plays only the missing ones, and writes the run's one Parquet file from
all of them in the original order, so the result is the same file an uninterrupted run writes; the parts are then
removed. Trajectory readers see only ``env=*/*.parquet``, never the parts.

A part is kept only when it holds exactly its episodes (the same task ids in the same order); a part written by
another task list (``collect.n_episodes`` changed) is set aside by name, never read.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from .trajectories import Trajectory, read_trajectories, write_trajectories
from .workdir import say

PART_EPISODES = 256
"Episodes per part: what a killed collection can lose at most (about 10 minutes of ALFWorld on one worker)."
PARTS = ".parts"


def parts_dir(root: str | Path, run_id: str) -> Path:
    return Path(root) / PARTS / run_id


def _part_path(folder: Path, start: int, stop: int) -> Path:
    return folder / f"part-{start:06d}-{stop - 1:06d}.parquet"


def _read_part(path: Path, specs: Sequence) -> list[Trajectory] | None:
    """The part's trajectories when they are exactly ``specs``' tasks in order, else None (named, set aside)."""
    try:
        trajs = read_trajectories(path)
    except Exception as e:  # a part is a cache of finished work: unreadable means play it again
        say(f"collect: {path} cannot be read ({type(e).__name__}: {e}); its episodes are played again")
        path.rename(path.with_name(path.name + ".unreadable"))
        return None
    if [t.task_id for t in trajs] != [s.task.task_id for s in specs]:
        say(f"collect: {path} holds other tasks than this run's episodes {path.stem[5:]}; set aside, played again")
        path.rename(path.with_name(path.name + ".foreign"))
        return None
    return trajs


def _eta(done: int, total: int, played: int, seconds: float) -> str:
    """Progress line: ``done/total``, episodes per second of this run and the time left at that rate.

    >>> _eta(300, 1000, 200, 100.0)
    '300/1000 episodes (2.00/s this run), about 6 min left'
    """
    rate = played / seconds if seconds > 0 and played else 0.0
    left = f"about {(total - done) / rate / 60:.0f} min left" if rate else "time left unknown"
    return f"{done}/{total} episodes ({rate:.2f}/s this run), {left}"


def run_in_parts(specs: Sequence, play: Callable[[Sequence], list[Trajectory]], root: str | Path, run_id: str,
                 part_episodes: int = PART_EPISODES, *, stop: Optional[Callable[[], str]] = None) -> list[Trajectory]:
    """Every spec's trajectory, in order: parts already written under ``root`` are read, the others played by
    ``play(chunk)`` and written before the next starts. Leaves the parts in place (``finish_parts`` removes them
    once the run's file is written). ``stop``, asked before each part still to play, returns why to stop (a spent
    budget, a signal) or "": then ``checkpoints.Paused`` is raised with the parts played so far kept."""
    folder = parts_dir(root, run_id)
    out: list[Trajectory] = []
    t0, played = time.monotonic(), 0
    chunks = [(i, min(i + part_episodes, len(specs))) for i in range(0, len(specs), max(1, part_episodes))]
    have = sum(1 for a, b in chunks if _part_path(folder, a, b).exists())
    if have:
        say(f"collect: {run_id}: {have} of {len(chunks)} parts already under {folder}; playing the rest")
    for a, b in chunks:
        path = _part_path(folder, a, b)
        trajs = _read_part(path, specs[a:b]) if path.exists() else None
        if trajs is None:
            if stop is not None and (why := stop()):
                from .checkpoints import Paused
                kept = sum(1 for c, d in chunks if _part_path(folder, c, d).exists())
                raise Paused(f"{run_id}: paused after {why}, {kept} of {len(chunks)} parts kept under {folder}; "
                             "run the same command to resume")
            trajs = play(specs[a:b])
            played += len(trajs)
            if all(t.error for t in trajs):  # a broken env: nothing worth keeping (the run's write names it)
                out += trajs
                continue
            staged = write_trajectories(trajs, folder / ".staging", path.stem)
            path.parent.mkdir(parents=True, exist_ok=True)
            for f in staged:  # one env per collection run: one file
                f.replace(path)
            say(f"collect: {run_id}: {_eta(b, len(specs), played, time.monotonic() - t0)}")
        out += trajs
    return out


def finish_parts(root: str | Path, run_id: str) -> None:
    """Remove a run's parts once its own file is written (the parts hold nothing the file does not)."""
    shutil.rmtree(parts_dir(root, run_id), ignore_errors=True)
    parent = Path(root) / PARTS
    if parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
