"""Where an RL run keeps its work: ``<out>.work/checkpoint-<step>`` to resume from, and the finished model ``<out>``.

A checkpoint is accelerate's state (model, optimizer, scheduler, RNG of every process) plus ``trainer_state.json``
(step, history, library version), written into ``.checkpoint-<step>.tmp``, sealed and renamed when complete
(``talentrl_core.checkpoints``, shared with SFT). A resume claims the working folder for this job (another job's
folder moves aside), verifies the newest checkpoint (a damaged one is named and set aside) and loads it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

import torch

from ..checkpoints import claim_work_dir, commit_staged, newest_sound, step_folders, write_final
from ..io import disk_full_named, read_json, write_json
from ..preemption import budget_spent, stop_reason
from ..workdir import holds_job, record_job, say, work_dir

META_FILE = "talentrl_meta.json"
STATE_FILE = "trainer_state.json"


class RunFiles:
    """The checkpoints and final model of one RL run (``stage`` names it in messages)."""

    def __init__(self, acc, out_dir: Path, stage: str, keep_previous: int, keep_checkpoints: int):
        self.acc, self.out_dir, self.stage = acc, Path(out_dir), stage
        self.work_dir = work_dir(self.out_dir)
        self.keep_previous, self.keep_checkpoints = keep_previous, keep_checkpoints

    def checkpoints(self) -> list[tuple[int, Path]]:
        return step_folders(self.work_dir, STATE_FILE)

    def save(self, step: int, job: dict, state: dict) -> Path:
        """``checkpoint-<step>`` with ``state`` as its ``trainer_state.json``; every process takes part."""
        final = self.work_dir / f"checkpoint-{step}"
        tmp = self.work_dir / f".checkpoint-{step}.tmp"
        main = self.acc.is_main_process
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self.acc.wait_for_everyone()
        with disk_full_named(final, "writing the checkpoint"):
            self.acc.save_state(str(tmp))
        self.acc.wait_for_everyone()
        if main:
            record_job(self.work_dir, job)
            write_json(tmp / STATE_FILE, state)
            commit_staged(tmp, final)
            if self.keep_checkpoints > 0:
                for _, old in self.checkpoints()[: -self.keep_checkpoints]:
                    shutil.rmtree(old, ignore_errors=True)
        self.acc.wait_for_everyone()
        return final

    def resume(self, job: dict, resume: bool) -> Optional[tuple[Path, dict]]:
        """(checkpoint, its trainer state) after loading it into the prepared objects; None: start at step 0."""
        if self.acc.is_main_process:
            claim_work_dir(self.work_dir, job, self.keep_previous, self.stage, lambda w: bool(self.checkpoints()),
                           ".checkpoint-*.tmp", self.out_dir)
            if resume:  # verified once, by the main process: a damaged newest one is named and set aside
                newest_sound(self.checkpoints(), self.stage, say)
        self.acc.wait_for_everyone()
        ckpts = self.checkpoints() if resume else []
        if not ckpts:
            return None
        _, path = ckpts[-1]
        self.acc.load_state(str(path))
        return path, read_json(path / STATE_FILE)

    def finished(self, job: dict) -> Optional[dict]:
        """The result recorded with a finished model of ``job`` in ``out_dir`` (None when there is none)."""
        if not holds_job(self.out_dir, job) or not (self.out_dir / META_FILE).is_file():
            return None
        meta = read_json(self.out_dir / META_FILE)
        say(f"{self.stage}: {self.out_dir} holds this job's finished model; not trained again")
        return {k: v for k, v in meta.items() if k not in ("stage", "config", "history")}

    def save_final(self, model, write: Callable[[Path], None], job: dict) -> None:
        """The finished model (weights checked finite first), swapped in atomically by the main process."""
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            for p in model.parameters():
                if not torch.isfinite(p).all():
                    raise FloatingPointError("RL produced non-finite weights; lower rl.lr")
            write_final(self.out_dir, job, self.keep_previous, self.stage, write)
        self.acc.wait_for_everyone()


def past_budget(acc, max_minutes: float, t0: float, stopped: Optional[str] = None) -> str:
    """Why this sitting ends after this update ('' while it goes on): a stop signal (``stopped``, its name;
    ``preemption.py``) or the wall-clock budget (``rl.max_minutes``, 0: none) since ``t0`` spent, on any process, so
    that all of them stop after the same update."""
    from .update import reduce_sum

    late = budget_spent(max_minutes, t0)
    if reduce_sum(acc, {"over": float(late or bool(stopped))})["over"] == 0:
        return ""
    return stop_reason(stopped, late, f"rl.max_minutes={max_minutes:g}")
