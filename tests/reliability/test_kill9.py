"""kill -9 trials: every stage (collect, distill, SFT, RL) killed during its work and at its checkpoint writes (and
SFT and RL stopped by SIGTERM), then re-run with the same command, ends with the result an uninterrupted run gives (Parquet rows, library
content, weights tensor by tensor). Slow (about 10 minutes on 2 cores): ``make test-all``.

Each trial runs the real CLI (``python -m pipeline.run <stage> ...``) on a tiny TextWorld configuration in its own
artifacts folder, seeded from the reference run's upstream artifacts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from talentrl_core.paths import ArtifactPaths
from talentrl_core.stages import STAGES as PIPELINE_STAGES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STAGES = [s for s in PIPELINE_STAGES if s != "evaluate"]
"""The stages killed, in chain order (``talentrl_core.stages.STAGES``): every one but evaluate, which keeps nothing
between runs (a killed evaluation runs again from the start)."""
_REL = ArtifactPaths(Path())
CACHES = {"sft": [str(_REL.base_model)]}
"Deterministic caches a stage builds beside its outputs (sft: the tiny base model and tokenizer); copied like them."
UPSTREAM = {s: [str(getattr(_REL, attr)) for up in STAGES[:i] for _, attr in PIPELINE_STAGES[up].outputs] +
            [c for up in STAGES[:i] for c in CACHES.get(up, [])] for i, s in enumerate(STAGES)}
"What each stage reads: the outputs (and caches) of the stages before it, copied from the reference run."
TINY = [
    "experiment=demo", "env.train_seeds=[1,6]", "collect.random_episodes=4", "collect.workers=1",
    "model.hidden_size=32", "model.num_hidden_layers=2", "model.num_attention_heads=2", "model.num_key_value_heads=1",
    "model.intermediate_size=64", "model.vocab_size=600",
    "model.threads=1",  # a fixed thread count: the governor's count follows the load and changes float summation order
    "sft.max_steps=12", "sft.save_steps=2", "sft.batch_size=4", "sft.micro_batch_size=4", "sft.warmup_steps=2",
    "rl.steps=4", "rl.tasks_per_step=1", "rl.group_size=4", "rl.checkpoint_every=1", "rl.keep_checkpoints=0",
    "tracker.mode=disabled",
]
TIMED_FROM_BAR = {"collect", "sft", "rl"}
"Stages whose work starts with a progress bar; distill's only bar is its last second (embedding), so it is timed whole."
# (stage, kill moment): "t=<share>" after that share of the reference stage's duration, "write" while a checkpoint
# or output is being written (its staging folder exists)
TRIALS = [(s, m) for s in STAGES for m in ("t=0.3", "t=0.5", "t=0.7", "t=0.9")] + \
         [("sft", "write"), ("sft", "write"), ("rl", "write"), ("rl", "write"), ("distill", "write"), ("collect", "write")] + \
         [("sft", "term=0.5"), ("rl", "term=0.5")]
# "term=<share>": SIGTERM instead of SIGKILL (talentrl_core/preemption.py): the stage checkpoints the step or update in
# progress and exits 75 (paused); the rerun ends as an uninterrupted run


def _env() -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               TOKENIZERS_PARALLELISM="false")
    env.setdefault("TALENTRL_CACHE_DIR", str(ROOT / "artifacts" / "cache"))
    return env


def _cmd(stage: str, art: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline.run", stage, *TINY, f"artifacts_dir={art}"]


def _started(proc: subprocess.Popen) -> dict:
    """Read the stage's stderr in a thread; ``out["work"]`` is set to the time its first progress bar appeared
    (imports and set-up are over: the stage is doing its work)."""
    out: dict = {"work": None}

    def read():
        for chunk in iter(lambda: proc.stderr.read(256), b""):
            if out["work"] is None and b"%|" in chunk:
                out["work"] = time.time()

    threading.Thread(target=read, daemon=True).start()
    return out


def _run(stage: str, art: Path) -> tuple[float, float]:
    """Run a stage to the end; (seconds before its first progress bar, seconds of work after it)."""
    t0 = time.time()
    proc = subprocess.Popen(_cmd(stage, art), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = _started(proc)
    assert proc.wait(timeout=900) == 0, f"{stage} failed"
    end = time.time()
    work = seen["work"] if seen["work"] and stage in TIMED_FROM_BAR else t0
    return work - t0, end - work


def _writing(stage: str, art: Path) -> bool:
    """True while the stage has a half-written checkpoint or output on disk."""
    pats = {"collect": ["trajectories/**/.*.tmp"], "distill": ["library/**/_transactions/*", "library/**/*.tmp"],
            "sft": ["models/sft.work/.staging-*", "models/.sft.*.tmp"],
            "rl": ["models/rl.work/.checkpoint-*.tmp", "models/.rl.*.tmp", "models/flat_grpo.work/.checkpoint-*.tmp"]}
    return any(any(art.glob(p)) for p in pats[stage])


def _kill_during(stage: str, art: Path, moment: str, timing: tuple[float, float], share_scale: float,
                 rng: random.Random) -> str:
    """Start the stage and SIGKILL it: ``t=<share>`` that share of the reference's work after its first progress
    bar (or of its whole run when it shows none), ``write`` the moment a staging folder appears; ``term=<share>``
    SIGTERM at that share, which must end in exit 75. Returns what happened ("finished" when the stage ended first)."""
    setup, work = timing
    proc = subprocess.Popen(_cmd(stage, art), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = _started(proc)
    t0 = time.time()
    if moment.startswith(("t=", "term=")):
        delay = work * float(moment.split("=")[1]) * share_scale * rng.uniform(0.9, 1.1)
        while setup and proc.poll() is None and seen["work"] is None and time.time() - t0 < setup * 3 + 5:
            time.sleep(0.01)
        deadline = (seen["work"] or t0) + delay
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.01)
    else:
        while proc.poll() is None and not _writing(stage, art) and time.time() - t0 < (setup + work) * 2:
            time.sleep(0.002)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGTERM if moment.startswith("term=") else signal.SIGKILL)
    rc = proc.wait()
    if alive and moment.startswith("term="):
        assert rc == 75, f"{stage} exited {rc} after SIGTERM, not 75 (paused)"
    return f"signalled at {time.time() - t0:.1f}s (exit {rc})" if alive else "finished"


def _result(stage: str, art: Path):
    """What must be identical after a kill and a re-run."""
    if stage == "collect":
        from talentrl_core.trajectories import read_trajectories

        rows = [(t.run_id, t.task_id, t.traj_uid, t.success, [s.action for s in t.steps])
                for t in read_trajectories(art / "trajectories", env="textworld")]
        return sorted(rows)
    if stage == "distill":
        from talentrl_core.library import Library
        from talentrl_core.config import LibraryConfig

        lib = Library.open(str(art / "library" / "lancedb"), cfg=LibraryConfig(uri=str(art / "library" / "lancedb")))
        def rows(records):
            return sorted(json.dumps(r.content(), sort_keys=True, default=str) for r in records)

        return rows(lib.skills()), rows(lib.talents()), rows(lib.labels())
    from safetensors.torch import load_file

    names = ["sft"] if stage == "sft" else ["rl", "flat_grpo"]
    return {n: {k: v.float().numpy().tobytes() for k, v in load_file(str(art / "models" / n / "model.safetensors")).items()}
            for n in names}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run of every stage, and each stage's duration."""
    art = tmp_path_factory.mktemp("kill9") / "A"
    timings = {s: _run(s, art) for s in STAGES}
    return art, timings


@pytest.mark.parametrize("stage,moment", TRIALS, ids=[f"{s}-{m.replace('=', '').replace('.', '')}-{i}" for i, (s, m) in enumerate(TRIALS)])
def test_kill9_then_rerun_equals_uninterrupted(reference, tmp_path, stage, moment):
    ref, timings = reference
    art = tmp_path / "B"
    for attempt in range(4):  # a stage that ended before the kill is tried again with an earlier kill
        shutil.rmtree(art, ignore_errors=True)
        for part in UPSTREAM[stage]:
            shutil.copytree(ref / part, art / part)
        how = _kill_during(stage, art, moment, timings[stage], 0.5 ** attempt, random.Random(f"{stage}{moment}{attempt}"))
        if how != "finished":
            break
    assert how != "finished", f"{stage} ended before every kill"
    _run(stage, art)
    assert _result(stage, art) == _result(stage, ref), how
    record = Path(os.environ.get("TALENTRL_KILL9_LOG", tmp_path / "kill9.jsonl"))
    with open(record, "a") as f:
        f.write(json.dumps({"stage": stage, "moment": moment, "how": how, "attempts": attempt + 1, "identical": True}) + "\n")
