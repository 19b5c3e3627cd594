"""Output folders of resumable stages: an earlier run with other settings is moved aside, never silently deleted.

A stage that writes checkpoints records its job (the settings and inputs its result depends on) in
``talentrl_job.json`` inside its folder. The next run of the same job resumes there. A run of another job finds the
folder, moves it to ``<folder>.prev-<UTC time>`` (the newest ``keep_previous_runs`` such copies are kept; 0 deletes
it) and says so in one line naming the settings that differ — what TRL's ``output_dir`` and verl's ``default_local_dir``
leave to the user, done for them.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from .io import write_json

JOB_FILE = "talentrl_job.json"
_MISSING = "<unset>"


def work_dir(folder: Path) -> Path:
    """Where a resumable stage keeps what it resumes from until ``folder`` is written whole: ``<folder>.work`` beside it.

    >>> work_dir(Path("models/sft")).as_posix()
    'models/sft.work'
    """
    return folder.with_name(folder.name + ".work")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"sft": {"lr": 1}}`` → ``{"sft.lr": 1}`` (lists and scalars are leaves).

    >>> flatten({"sft": {"lr": 1, "steps": 2}, "data": "ab"})
    {'sft.lr': 1, 'sft.steps': 2, 'data': 'ab'}
    """
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differing_keys(old: Optional[dict], new: dict) -> list[str]:
    """``key: old → new`` for every setting that differs (``old`` None: the earlier run recorded none).

    >>> differing_keys({"sft": {"lr": 1, "steps": 2}}, {"sft": {"lr": 1, "steps": 3}})
    ['sft.steps: 2 → 3']
    """
    if old is None:
        return ["settings not recorded (a run of an older version or another tool)"]
    a, b = flatten(old), flatten(new)
    return [f"{k}: {_short(a.get(k, _MISSING))} → {_short(b.get(k, _MISSING))}"
            for k in sorted(set(a) | set(b)) if a.get(k, _MISSING) != b.get(k, _MISSING)]


def _short(v: Any, n: int = 40) -> str:
    s = json.dumps(v, default=str) if not isinstance(v, str) else v
    return s if len(s) <= n else s[: n - 3] + "..."


RETIRED = {"sft": ("max_minutes",)}
"""Settings that earlier versions recorded in a job and that are no longer part of one (a sitting's time budget):
dropped from a recorded job before it is compared, so a run recorded with them still resumes."""

ADDED = {"sft": {"prompt_loss_weight": 0.0}}
"""Settings added to a job after runs were recorded, each with the value that does what those runs did: compared
with a recorded job that lacks them as that value, so a run recorded before a setting existed still resumes under
its default."""


def recorded_job(folder: Path, like: Optional[dict] = None) -> Optional[dict]:
    """The job recorded in ``folder`` (None when there is none or it cannot be read), ``RETIRED`` settings left out;
    ``ADDED`` settings that ``like`` (the job it is compared with) holds and the record lacks are filled in."""
    try:
        job = json.loads((folder / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    for section, keys in RETIRED.items():
        for key in keys:
            if isinstance(job, dict) and isinstance(job.get(section), dict):
                job[section].pop(key, None)
    for section, defaults in ADDED.items():
        if isinstance(job, dict) and isinstance(job.get(section), dict) and isinstance((like or {}).get(section), dict):
            job[section] = {**{k: v for k, v in defaults.items() if k in like[section]}, **job[section]}
    return job


def _normalise(job: dict) -> dict:
    return json.loads(json.dumps(job, sort_keys=True, default=str))


def holds_job(folder: str | Path, job: dict) -> bool:
    """Whether ``folder`` records ``job`` (``RETIRED`` settings left out of the record, ``ADDED`` ones filled in)."""
    job = _normalise(job)
    return recorded_job(Path(folder), job) == job


def move_aside(folder: Path, keep: int, log: Callable[[str], None] | None = None) -> Optional[Path]:
    """Rename ``folder`` to ``<folder>.prev-<UTC time>`` and drop the oldest such copies beyond ``keep``, naming each
    one it deletes; with ``keep`` 0 delete it. Returns the new path (None when deleted)."""
    if keep <= 0:
        shutil.rmtree(folder)
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    dest = folder.with_name(f"{folder.name}.prev-{stamp}")
    n = 1
    while dest.exists():
        dest, n = folder.with_name(f"{folder.name}.prev-{stamp}-{n}"), n + 1
    folder.rename(dest)
    previous = sorted(folder.parent.glob(f"{folder.name}.prev-*"), key=lambda p: p.stat().st_mtime)
    for old in previous[: max(0, len(previous) - keep)]:
        shutil.rmtree(old, ignore_errors=True)
        (log or say)(f"{folder}: deleted its oldest moved-aside copy {old} (keep_previous_runs={keep} keeps the "
                     f"newest {keep}; raise it to keep more)")
    return dest


def say(msg: str) -> None:
    """One line to stderr (stdout carries a stage's JSON)."""
    print(msg, file=sys.stderr, flush=True)


def set_aside(folder: str | Path, job: dict, keep_previous: int, stage: str,
              log: Callable[[str], None] = say) -> Optional[Path]:
    """Before ``job``'s result replaces ``folder``: when the folder holds another job's result (or one that recorded
    no job), move it aside (``move_aside``) with one line naming the settings that differ. The same job's result
    is left to be replaced. Returns where it went (None when nothing moved)."""
    folder = Path(folder)
    job = _normalise(job)
    if not folder.exists() or not any(folder.iterdir()):
        return None
    old = recorded_job(folder, job)
    if old == job:
        return None
    diff = differing_keys(old, job)
    moved = move_aside(folder, keep_previous, log)
    where = f"moved to {moved}" if moved else "deleted (keep_previous_runs=0)"
    log(f"{stage}: {folder} held a run with other settings ({'; '.join(diff[:6])}"
        f"{f'; +{len(diff) - 6} more' if len(diff) > 6 else ''}); {where}")
    return moved


def record_job(folder: str | Path, job: dict) -> None:
    """Record ``job`` in ``folder`` when it has no record yet (a run that saves before it ever claimed)."""
    if not (Path(folder) / JOB_FILE).exists():
        write_json(Path(folder) / JOB_FILE, _normalise(job))


def claim(folder: str | Path, job: dict, keep_previous: int, stage: str,
          log: Callable[[str], None] = say, holds_work: Callable[[Path], bool] | None = None) -> Optional[Path]:
    """Make ``folder`` the working folder of ``job``: kept as it is when it holds a run of the same job (resume),
    moved aside (``set_aside``) when it holds another job's work, created when missing.

    ``holds_work(folder)`` says whether there is anything worth keeping (default: anything besides the job file);
    a folder without any is emptied. Returns where an earlier run went (None when nothing was moved).
    """
    folder = Path(folder)
    job = _normalise(job)
    moved: Optional[Path] = None
    if folder.exists() and not holds_job(folder, job):
        if holds_work(folder) if holds_work else any(p.name != JOB_FILE for p in folder.iterdir()):
            moved = set_aside(folder, job, keep_previous, stage, log)
        else:
            shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / JOB_FILE, job)
    return moved
