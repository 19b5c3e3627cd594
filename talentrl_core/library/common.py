"""Pieces both distillers share: which trajectories count, goal text, near-duplicate merging, oracle labels."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Hashable, Iterable, Optional, Sequence

import numpy as np

from ..trajectories import Trajectory
from .schema import LabelRecord, SkillRecord

MAX_SOURCES = 20
"At most this many source trajectory ids are kept per skill (sorted, so the choice is deterministic)."


class SplitLeakError(ValueError):
    """Non-training trajectories were given where only training rollouts are allowed."""


def require_train(trajectories: Iterable[Trajectory], what: str) -> None:
    """Raise ``SplitLeakError`` if any trajectory's split is not ``train`` (no validation leakage)."""
    bad = Counter(t.split for t in trajectories if t.split != "train")
    if bad:
        raise SplitLeakError(
            f"{what} accepts training rollouts only; got splits {dict(sorted(bad.items()))} — "
            "pass trajectories collected with collect.split=train"
        )


def usable(trajectories: Iterable[Trajectory], env: str) -> tuple[list[Trajectory], dict]:
    """Trajectories of ``env`` without an env error, sorted by (task_type, traj_uid); plus counts."""
    trajectories = list(trajectories)
    other_env = sum(t.env != env for t in trajectories)
    errors = sum(t.env == env and bool(t.error) for t in trajectories)
    ok = sorted((t for t in trajectories if t.env == env and not t.error), key=lambda t: (t.task_type, t.traj_uid))
    report = {
        "n_trajectories": len(ok),
        "n_success": sum(t.success for t in ok),
        "n_failure": sum(not t.success for t in ok),
        "n_skipped_env_error": errors,
        "n_skipped_other_env": other_env,
        "splits": dict(sorted(Counter(t.split for t in ok).items())),
    }
    return ok, report


def goal_of(t: Trajectory) -> str:
    """The task instruction: ``goal``, else the task payload's goal/question, else a 'Task:' prompt line."""
    g = getattr(t, "goal", "") or ""
    if g.strip():
        return " ".join(g.split())
    try:
        payload = json.loads(t.task_json or "{}").get("payload", {}) or {}
    except (json.JSONDecodeError, AttributeError):
        payload = {}
    for key in ("goal", "question", "instruction"):
        if isinstance(payload.get(key), str) and payload[key].strip():
            return " ".join(payload[key].split())
    for s in t.steps[:2]:
        for line in (s.prompt or "").splitlines():
            if line.startswith("Task:"):
                return " ".join(line[5:].split())
    return ""


def cut(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def merge_near_duplicates(skills: Sequence[SkillRecord], vectors: np.ndarray, threshold: float,
                          procedures: Optional[Sequence[Hashable]] = None) -> tuple[list[SkillRecord], dict[str, str]]:
    """Greedy merge in the given (rank) order: a skill whose cosine with an already kept skill of the same
    kind exceeds ``threshold`` is folded into it (task types and sources united, text of the kept one).
    ``procedures[i]`` (the offline distiller's action pattern) must then be equal too: sentence embeddings put
    "go north, then go east, then take the coin" and "... go west ..." above 0.95, and merging them leaves one
    skill that tells half the tasks the wrong way (the fork: docs/talents.md §13).

    Returns the kept skills (with vectors set) and ``{merged id: kept id}`` for every input id.
    """
    kept: list[SkillRecord] = []
    kept_vecs: list[np.ndarray] = []
    remap: dict[str, str] = {}
    kept_procs: list = []
    procs = list(procedures) if procedures is not None else [None] * len(skills)
    for s, v, proc in zip(skills, vectors, procs):
        target = None
        for j, (k, kv) in enumerate(zip(kept, kept_vecs)):
            if k.kind == s.kind and kept_procs[j] == proc and float(kv @ v) > threshold:
                target = j
                break
        if target is None:
            kept.append(replace(s, vector=[float(x) for x in v]))
            kept_vecs.append(np.asarray(v, dtype=np.float32))
            kept_procs.append(proc)
            remap[s.skill_id] = s.skill_id
        else:
            k = kept[target]
            k.task_types = sorted(set(k.task_types) | set(s.task_types))
            k.source_traj_ids = sorted(set(k.source_traj_ids) | set(s.source_traj_ids))[:MAX_SOURCES]
            remap[s.skill_id] = k.skill_id
    return kept, remap


def oracle_labels(env: str, traj_labels: Sequence[LabelRecord]) -> list[LabelRecord]:
    """Per task type, the talent most of its labelled trajectories follow (ties: smaller id)."""
    by_type: dict[str, Counter] = {}
    for l in traj_labels:
        by_type.setdefault(l.task_type, Counter())[l.talent_id] += 1
    out = []
    for tt in sorted(by_type):
        c = by_type[tt]
        tid, n = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        out.append(LabelRecord(env=env, task_type=tt, talent_id=tid, kind="oracle", share=round(n / sum(c.values()), 6)))
    return out


def kind_counts(skills: Sequence[SkillRecord], task_types: Optional[Sequence[str]] = None) -> dict:
    """Counts per kind, and per task type and kind (a general skill counts for every type it lists)."""
    per_kind = Counter(s.kind for s in skills)
    types = sorted(set(task_types or []) | {tt for s in skills for tt in s.task_types})
    per_type = {tt: {k: sum(1 for s in skills if s.kind == k and tt in s.task_types) for k in ("general", "specific", "mistake")} for tt in types}
    return {"per_kind": {k: per_kind.get(k, 0) for k in ("general", "specific", "mistake")}, "per_task_type": per_type}
