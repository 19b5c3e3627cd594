"""Experiment tracking: a thin wandb wrapper, offline by default, a null object when disabled.

    tracker = start_run(cfg, "sft")
    try:
        tracker.log({"sft/loss": 1.2, "sft/lr": 3e-3}, step=10)
    finally:
        tracker.finish()

or ``with start_run(cfg, "sft") as tracker: ...`` (finishes on exit, marking the run failed on an
exception: the pipeline's stages do this, so a crashed stage's run ends with a non-zero exit code). ``cfg.tracker.mode``: ``offline`` (default; files under ``<artifacts_dir>/wandb``, sync
later with ``wandb sync``), ``online`` (needs network and a login), ``disabled`` (``NullTracker``: same
methods, does nothing). ``WANDB_MODE=disabled`` in the environment also gives the null tracker.

Secrets never reach the tracker: config keys named like a credential (``*_key``, ``*_api_key_env``,
``*token``, ``*secret``, ``*password``) are dropped from the logged config (``redact``).
Metric names follow one namespace per stage (``sft/loss``, ``rl/kl``, ``eval/success``).

What a stage produces is logged as a wandb Artifact (``log_artifact``): by *reference* for what is large or lives
elsewhere (``file://`` folder of a model or of the LanceDB library: wandb records each file's path, size and md5 and
uploads nothing, offline or online), as files for what is small (the evaluation report). An artifact that cannot be
logged is a warning on stderr, never a failed stage: its outputs are already written.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from .config import TalentRLConfig, TrackerMode

SECRET_KEY = re.compile(r"(^|_)(api_?key|key|token|secret|password|passwd|credentials?)(_env)?$", re.IGNORECASE)
"Config keys dropped before logging. Whole words only, so ``max_new_tokens`` or ``token_agg`` stay."


def redact(obj: Any) -> Any:
    """A JSON-able copy of a config (dataclass or dict) without credential-like keys.

    >>> redact({"lr": 0.1, "openai_api_key_env": "OPENAI_API_KEY", "hf_token": "x", "token_agg": "token_mean"})
    {'lr': 0.1, 'token_agg': 'token_mean'}
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: redact(v) for k, v in obj.items() if not SECRET_KEY.search(str(k))}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, Enum):
        return obj.value
    return obj


def artifact_name(*parts: Any) -> str:
    """A wandb artifact name from ``parts`` (letters, digits, ``-``, ``_``, ``.`` only).

    >>> artifact_name("demo", "model", "flat_grpo"), artifact_name("my exp/1", "library")
    ('demo-model-flat_grpo', 'my-exp-1-library')
    """
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(str(p) for p in parts if p)).strip("-")[:128]


def reference_uri(path: str | os.PathLike) -> str:
    """``path`` as the URI a reference artifact records: a local path becomes ``file://<absolute path>``; a URI
    (``s3://…``) stays as it is.

    >>> reference_uri("/tmp/x"), reference_uri("s3://bucket/lib")
    ('file:///tmp/x', 's3://bucket/lib')
    """
    text = str(path)
    return text if re.match(r"^[a-z][a-z0-9+.-]*://", text) else Path(text).resolve().as_uri()


class NullTracker:
    """Tracking switched off: every method exists and does nothing."""

    run_id: Optional[str] = None
    url: Optional[str] = None
    run_dir: Optional[str] = None

    def log(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        pass

    def summary(self, values: Mapping[str, Any]) -> None:
        pass

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        pass

    def log_images(self, images: Mapping[str, str]) -> None:
        pass

    def log_artifact(self, name: str, kind: str, references: Iterable[str | os.PathLike] = (),
                     files: Iterable[str | os.PathLike] = (), metadata: Optional[Mapping[str, Any]] = None
                     ) -> Optional[str]:
        """Log an artifact ``name`` of type ``kind`` (``library``, ``model``, ``evaluation``, ``dataset``): each of
        ``references`` by reference (a folder or file here, ``file://``, or a URI; nothing uploaded), each of ``files``
        as a file (uploaded when the run syncs; keep them small). Returns the artifact's name (None: not logged)."""
        return None

    def finish(self, exit_code: int = 0) -> None:
        pass

    def metadata(self) -> dict:
        """Keys for the stage's returned metadata (empty when nothing was tracked)."""
        return {}

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(exit_code=1 if exc_type else 0)


class WandbTracker(NullTracker):
    """One wandb run per stage invocation."""

    def __init__(self, run) -> None:
        self._run = run
        self._finished = False
        self.run_id = run.id
        self.url = run.url  # None offline
        self.run_dir = run.dir

    def log(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        self._run.log(dict(metrics), step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self._run.summary.update(dict(values))

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        import wandb

        self._run.log({name: wandb.Table(columns=columns, data=rows)})

    def log_images(self, images: Mapping[str, str]) -> None:
        """``{key: png path}`` as wandb images (the report's plots)."""
        import wandb

        self._run.log({k: wandb.Image(str(p)) for k, p in images.items()})

    def log_artifact(self, name: str, kind: str, references: Iterable[str | os.PathLike] = (),
                     files: Iterable[str | os.PathLike] = (), metadata: Optional[Mapping[str, Any]] = None
                     ) -> Optional[str]:
        import wandb

        name = artifact_name(name)
        try:
            art = wandb.Artifact(name, type=kind, metadata=redact(dict(metadata or {})))
            for ref in references:
                uri = reference_uri(ref)
                # file://: each file's md5 and size (the version changes with the content); another scheme: the URI
                art.add_reference(uri, checksum=uri.startswith("file://"))
            for f in files:
                art.add_file(str(f))
            self._run.log_artifact(art)
        except Exception as e:  # noqa: BLE001 - tracking never fails a stage whose outputs are written
            print(f"wandb: artifact {name} ({kind}) not logged: {type(e).__name__}: {e}", file=sys.stderr)
            return None
        return name

    def finish(self, exit_code: int = 0) -> None:
        if not self._finished:  # idempotent: safe in nested finally blocks
            self._finished = True
            self._run.finish(exit_code=exit_code)

    def metadata(self) -> dict:
        meta = {"wandb_run_id": self.run_id, "wandb_mode": self._run.settings.mode}
        if self.url:
            meta["wandb_url"] = self.url
        if self.run_dir:
            meta["wandb_dir"] = str(self.run_dir)
        return meta


def start_run(cfg: TalentRLConfig, stage: str, **init_kwargs) -> NullTracker:
    """A tracker for ``stage`` configured by ``cfg.tracker``; always call ``.finish()`` (in ``finally``)."""
    mode = TrackerMode(cfg.tracker.mode)
    if mode == TrackerMode.disabled or os.environ.get("WANDB_MODE") == "disabled":
        return NullTracker()
    import wandb  # slow import; only when tracking is on

    wandb_dir = os.environ.get("WANDB_DIR") or cfg.artifacts_dir
    os.makedirs(wandb_dir, exist_ok=True)
    run = wandb.init(
        project=cfg.tracker.project,
        entity=cfg.tracker.entity,
        mode=mode.value,
        dir=wandb_dir,
        job_type=stage,
        group=cfg.experiment,
        name=f"{cfg.experiment}-{stage}",
        config=redact(cfg),
        reinit="create_new",
        **init_kwargs,
    )
    return WandbTracker(run)
