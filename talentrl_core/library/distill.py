"""``distill_library``: the one call the distill stage makes (trajectories → a new library version)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Optional, Sequence

from ..config import Distiller, LibraryConfig
from ..trajectories import Trajectory
from .embed import TextEncoder, embedder_for
from .store import Library

log = logging.getLogger(__name__)


def by_procedure(trajectories: list[Trajectory], env: str) -> list[Trajectory]:
    """``env``'s trajectories with their task type's procedure in place of the strategy that produced them
    (``library.talents_by=procedure``; copies: the trajectories on disk keep their strategy)."""
    from ..envs.registry import family_spec

    spec = family_spec(env)
    if spec.procedure_of is None:
        raise ValueError(f"library.talents_by=procedure: {env} has no task procedures (FamilySpec.procedure_of); "
                         "use talents_by=strategy")
    out = []
    for t in trajectories:
        proc = spec.procedure_of(t.task_type) if t.env == env else None
        out.append(dataclasses.replace(t, strategy=proc) if proc else t)
    return out


def distill_library(
    trajectories: list[Trajectory],
    cfg: LibraryConfig,
    env: str,
    *,
    embedder: Optional[TextEncoder] = None,
    generator: Optional[Callable[[list[dict]], str]] = None,
) -> dict:
    """Distil ``env``'s trajectories with ``cfg.distiller`` and write them to ``cfg.uri`` as a new version.

    Replaces ``env``'s skills, talents and labels (other envs in the library are kept). ``generator``
    (teacher distiller only) replaces the HTTP endpoint with a local callable, e.g. ``hf_generator(...)``.
    Returns JSON-able metadata: ``version``, counts per kind and task type, ``n_talents``,
    ``label_coverage`` (share of successful trajectories with a routing label) and the distiller's report.
    """
    env = str(env)  # an EnvName member is written as its plain value
    if not any(t.env == env for t in trajectories):
        raise ValueError(f"no trajectories of env {env!r} to distil (got envs {sorted({t.env for t in trajectories})})")
    if cfg.talents_by == "procedure":
        trajectories = by_procedure(trajectories, env)
    enc = embedder or embedder_for(cfg)
    n_strategies = len({t.strategy for t in trajectories if t.env == env and t.strategy and t.success})
    if n_strategies >= 2 and cfg.n_talents == 0:  # one talent per generating strategy is what the data supports
        cfg = dataclasses.replace(cfg, n_talents=n_strategies)
    if cfg.distiller == Distiller.teacher or generator is not None:
        from .distill_teacher import distill_teacher

        res = distill_teacher(trajectories, cfg, env, enc, generator=generator)
    else:
        from .distill_offline import distill_offline

        res = distill_offline(trajectories, cfg, env, enc)
    if n_strategies >= 1:
        from .strategy_labels import describe_talents, strategy_labels

        labels, sreport = strategy_labels(env, trajectories, res.labels, [t.talent_id for t in res.talents])
        res.labels = labels
        res.talents = describe_talents(env, res.talents, sreport["strategy_talent"], sreport["strategy_matrix"])
        res.report.update(sreport)
        res.report["oracle"] = {l.task_type: l.talent_id for l in labels if l.kind == "oracle"}
    lib = Library.for_writing(cfg.uri, cfg=cfg, embedder=enc)
    if not res.skills and not res.talents:  # an empty version would become the latest and every stage would use it
        where = f" (teacher {cfg.teacher_base_url}: {res.report.get('teacher', {})})" if res.report.get("distiller") == "teacher" else ""
        raise ValueError(f"the {res.report.get('distiller', cfg.distiller)} distiller produced no skills and no talents "
                         f"for env {env}{where}: nothing committed; {cfg.uri} stays at version {lib.latest_version}")
    version = lib.commit(env, res.skills, res.talents, res.labels, note=f"distill:{res.report['distiller']}:{env}")
    meta = {"env": env, "uri": str(cfg.uri), "version": version, "embedder": enc.name, **res.report}
    log.info("distilled %s: version %d, skills %s, %d talents, label coverage %.2f",
             env, version, meta["skills"]["per_kind"], meta["n_talents"], meta["label_coverage"])
    return meta
