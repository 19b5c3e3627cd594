"""What each pipeline stage records in the tracker (``tracking.py``: wandb, or nothing): scalars, tables and
artifacts by reference, one function per stage; ``stages.py`` calls them inside the stage's run."""

from __future__ import annotations

from pathlib import Path

from .config import TalentRLConfig
from .paths import ArtifactPaths


COLLECT_SCALARS = ("episodes", "success_rate", "errors", "invalid_actions", "mean_steps")


def log_collection(tracker, cfg: TalentRLConfig, meta: dict, split: str) -> None:
    """Collection to the tracker: ``collect/<k>`` overall, ``collect/<strategy>/<k>`` per strategy expert and
    ``collect/random/<k>`` for the random episodes (k: episodes, success_rate, errors, invalid_actions, mean_steps),
    a table of the same per strategy, and the trajectories folder of ``split`` as a ``dataset`` artifact (by
    reference)."""
    from .tracking import artifact_name

    parts = {"all": meta, **meta.get("strategies", {}), **({"random": meta["random"]} if "random" in meta else {})}
    tracker.summary({f"collect/{k}" if name == "all" else f"collect/{name}/{k}": m[k]
                     for name, m in parts.items() for k in COLLECT_SCALARS})
    tracker.log_table("collect/strategies", ["strategy", *COLLECT_SCALARS],
                      [[name, *(m[k] for k in COLLECT_SCALARS)] for name, m in parts.items()])
    tracker.log_artifact(artifact_name(cfg.experiment, "trajectories", cfg.env.name), "dataset",
                         references=[ArtifactPaths.of(cfg).trajectories],
                         metadata={"env": str(cfg.env.name), "split": split, "run_id": meta["run_id"],
                                   **{k: meta[k] for k in COLLECT_SCALARS}})


def log_library(tracker, cfg: TalentRLConfig, meta: dict) -> None:
    """Distillation to the tracker: ``distill/skills`` (and per kind), ``distill/talents``, ``distill/version``,
    ``distill/label_coverage``; the library as a ``library`` artifact referencing its LanceDB folder (or URI), the
    version in its metadata."""
    from .tracking import artifact_name

    per_kind = (meta.get("skills") or {}).get("per_kind", {})
    tracker.summary({"distill/version": meta["version"], "distill/skills": sum(per_kind.values()),
                     **{f"distill/skills_{k}": n for k, n in per_kind.items()},
                     "distill/talents": meta.get("n_talents", 0), "distill/label_coverage": meta.get("label_coverage", 0.0),
                     "distill/trajectories": meta["trajectories"]})
    tracker.log_artifact(artifact_name(cfg.experiment, "library"), "library", references=[meta["uri"]],
                         metadata={"library_version": meta["version"], "env": meta.get("env"), "uri": str(meta["uri"]),
                                   "embedder": meta.get("embedder"), "skills": per_kind, "talents": meta.get("n_talents"),
                                   "distiller": meta.get("distiller")})


def log_model(tracker, cfg: TalentRLConfig, system: str, checkpoint: Path, info: dict) -> None:
    """A trained checkpoint folder as a ``model`` artifact by reference (``file://``: paths, sizes and md5s; no
    weights uploaded), with the library version and the figures of ``info`` in its metadata."""
    from .tracking import artifact_name

    meta = {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) and not k.startswith("wandb")}
    tracker.log_artifact(artifact_name(cfg.experiment, "model", system), "model", references=[checkpoint],
                         metadata={"system": system, "env": str(cfg.env.name), "path": str(checkpoint), **meta})


def log_evaluation(tracker, metrics: dict, files: dict) -> None:
    """Evaluation to the tracker: success per system and panel (scalars and a table with intervals), the paired
    tests, and the report's plots as images."""
    rows = [[s, p, b["success"], b["ci95"][0], b["ci95"][1], b["n"]] for s, panels in metrics["systems"].items()
            for p, b in panels.items()]
    tracker.summary({f"eval/{s}/{p}/success": v for s, p, v, *_ in rows})
    tracker.log_table("eval/success", ["system", "panel", "success", "ci_low", "ci_high", "n"], rows)
    paired = [[p, pair, c["a_only"], c["b_only"], c["p_mcnemar"]] for p, comps in (metrics.get("paired") or {}).items()
              for pair, c in comps.items()]
    if paired:
        tracker.log_table("eval/paired", ["panel", "pair", "a_only", "b_only", "p_mcnemar"], paired)
    tracker.log_images({f"eval/{Path(f).stem}": f for f in files.values() if str(f).endswith(".png")})


REPORT_UPLOAD_MAX_BYTES = 5 * 2**20
"Evaluation files up to this size go into the ``evaluation`` artifact as files; bigger ones (episodes) by reference."


def log_report(tracker, cfg: TalentRLConfig, out: dict) -> None:
    """The evaluation as an ``evaluation`` artifact: report.md, metrics.json and the plots as files, the per-episode
    log by reference; systems evaluated and skipped in its metadata."""
    from .tracking import artifact_name

    paths = [Path(f) for f in out["files"].values() if Path(f).is_file()]
    small = [p for p in paths if p.stat().st_size <= REPORT_UPLOAD_MAX_BYTES]
    tracker.log_artifact(artifact_name(cfg.experiment, "evaluation"), "evaluation", files=small,
                         references=[p for p in paths if p not in small],
                         metadata={"systems": sorted(out["metrics"].get("systems", {})), "skipped": out.get("skipped", {}),
                                   "report": out["files"].get("report.md")})
