"""Checkpoints that prove what they hold: sealed when written, verified before a resume loads them.

SFT (``sft.py``) and RL (``rl/trainer.py``) write each checkpoint into a staging folder and rename it when complete,
so a kill never leaves a half-written ``checkpoint-<step>``. What the rename cannot catch is damage afterwards: a
disk or copy that truncates the optimizer state or the weights of a checkpoint that was complete. So each checkpoint
is *sealed* before its rename (``talentrl_files.json``: every file's size and sha256, as DVC records an output's
md5), and ``newest_sound`` verifies a checkpoint before it is resumed: a damaged one is named (the file and what is
wrong) and set aside as ``damaged-checkpoint-<step>`` (not deleted, and out of reach of checkpoint rotation), and the
run resumes from the one before. A checkpoint written before sealing existed is checked by structure instead:
safetensors headers against the file size, torch's zip archives by their CRCs, JSON by parsing.

Cost: hashing reads each checkpoint once more at save and at resume (~1 GB/s; 0.1 s for the demo's 80 MB).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from .io import write_json

SEAL = "talentrl_files.json"
DAMAGED = "damaged-"
"Prefix a damaged checkpoint is renamed with (``damaged-checkpoint-6``)."
PAUSED_EXIT = 75
"Exit code of a stage paused at its time budget (``EX_TEMPFAIL`` in sysexits.h: run it again)."


class Paused(Exception):
    """A stage stopped at its sitting's time budget (``sft.max_minutes``, ``rl.max_minutes``) with its progress in a sealed checkpoint
    and no final model written: the same command resumes it. The command line exits ``PAUSED_EXIT``; under Dagster or
    ``dvc repro`` the step fails with this message and nothing downstream runs on an unfinished model."""

    exit_code = PAUSED_EXIT


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SEAL)


def seal(folder: str | os.PathLike) -> None:
    """Record every file of ``folder`` (size and sha256) in ``<folder>/talentrl_files.json``."""
    folder = Path(folder)
    write_json(folder / SEAL, {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
                               for p in _files(folder)})


def _structure_fault(path: Path) -> Optional[str]:
    """What is wrong with an unsealed file that has a checkable structure (None: nothing found)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), "np") as f:  # checks the header against the file's length
                list(f.keys())
        elif path.suffix in (".pt", ".bin", ".pth") and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad:
                return f"entry {bad} fails its CRC"
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix in (".pt", ".bin", ".pth") and path.stat().st_size == 0:
            return "empty file"
    except Exception as e:  # noqa: BLE001 - every reader raises its own type for a damaged file
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def fault(folder: str | os.PathLike) -> Optional[str]:
    """``"<file>: <what is wrong>"`` for the first damaged file of a checkpoint folder, None when it is sound."""
    folder = Path(folder)
    try:
        recorded = json.loads((folder / SEAL).read_text())
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError) as e:
        return f"{folder / SEAL}: the checkpoint's seal cannot be read ({e})"
    if recorded is None:
        for p in _files(folder):
            why = _structure_fault(p)
            if why:
                return f"{p}: {why}"
        return None
    for name, want in sorted(recorded.items()):
        p = folder / name
        if not p.is_file():
            return f"{p}: missing"
        size = p.stat().st_size
        if size != want["bytes"]:
            return f"{p}: {size} bytes, {want['bytes']} when written (truncated or overwritten)"
        if _sha256(p) != want["sha256"]:
            return f"{p}: its sha256 differs from the one recorded when it was written"
    return None


def newest_sound(found: Sequence[tuple[int, Path]], stage: str, log: Callable[[str], None]) -> Optional[Path]:
    """The newest of ``found`` ((step, folder), any order) whose files verify. Each damaged one is named in one line
    and renamed ``damaged-checkpoint-<step>``; None when no checkpoint is sound."""
    ordered = sorted(found, key=lambda sp: sp[0], reverse=True)
    for i, (_, path) in enumerate(ordered):
        why = fault(path)
        if why is None:
            return path
        dest = path.with_name(DAMAGED + path.name)
        n = 1
        while dest.exists():
            dest, n = path.with_name(f"{DAMAGED}{path.name}-{n}"), n + 1
        os.replace(path, dest)
        nxt = f"resuming from {ordered[i + 1][1].name} if it verifies" if i + 1 < len(ordered) else "starting from step 0"
        log(f"{stage}: {why}: {path.name} is damaged and was set aside as {dest} (nothing deleted); {nxt}")
    return None


def model_digest(name_or_path: str | os.PathLike) -> list:
    """What a model is, wherever it lies: ``[name, bytes, sha1]`` of its weights and tokenizer files, so that a job
    recorded before its artifacts folder was moved or copied still matches after (a Hub id is itself)."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        return [str(name_or_path)]
    files = sorted({*folder.glob("*.safetensors"), *folder.glob("tokenizer.json")})
    return [[p.name, p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest()] for p in files]


def model_job(model_cfg) -> dict:
    """The model settings a checkpoint's job holds: what the model is, not where it runs (``threads`` left out: a
    resume on another thread count continues the same job)."""
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(model_cfg).items() if k != "threads"}


def step_folders(work: str | os.PathLike, must_hold: Optional[str] = None) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` in ``work`` (holding ``must_hold``, when given), by step."""
    out = []
    for p in Path(work).glob("checkpoint-*"):
        step = p.name.split("-")[-1]
        if p.is_dir() and step.isdigit() and (must_hold is None or (p / must_hold).exists()):
            out.append((int(step), p))
    return sorted(out)


def commit_staged(staging: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Seal a completely written ``staging`` folder and rename it to ``final`` (replacing an older one)."""
    import shutil

    from .io import as_created_tree

    final = Path(final)
    as_created_tree(staging)  # readable as a plain mkdir/open would make it (writers inside may make 0600 files)
    seal(staging)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    return final


def claim_work_dir(work: Path, job: dict, keep_previous: int, stage: str, holds_work: Callable[[Path], bool],
                   staging_glob: str, out_dir: Path) -> None:
    """Before a run of ``job``: its working folder kept for resume (the same job) or moved aside (another job,
    ``workdir.claim``); staging folders of a checkpoint write that never finished, and what a killed swap of the
    final model left (``io.remove_orphans``), removed."""
    import shutil

    from .io import remove_orphans
    from .workdir import claim

    remove_orphans(out_dir)
    claim(work, job, keep_previous, stage, holds_work=holds_work)
    for orphan in work.glob(staging_glob):
        shutil.rmtree(orphan, ignore_errors=True)


def write_final(out_dir: Path, job: dict, keep_previous: int, stage: str, write: Callable[[Path], None]) -> None:
    """The finished model: an earlier one of another job moved aside (``workdir.set_aside``), then ``write(tmp)``
    and the job record swapped in atomically; a full disk is named as one."""
    from .io import atomic_dir, disk_full_named
    from .workdir import JOB_FILE, set_aside

    set_aside(out_dir, job, keep_previous, stage)
    with disk_full_named(out_dir, "writing the model"), atomic_dir(out_dir) as tmp:
        write(tmp)
        write_json(tmp / JOB_FILE, job)
