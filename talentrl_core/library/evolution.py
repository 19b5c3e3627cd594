"""Library evolution during RL (DESIGN.md §3, SkillRL's "recursive evolution" made safe).

* ``propose_candidates`` mines candidate skills from **training** rollouts only — any trajectory whose
  split is not ``train`` raises ``SplitLeakError`` before anything is read. Only task types whose success
  rate is below ``success_threshold`` get candidates: mistakes from their failures and the procedures of
  their successes (the offline miner, distill_offline.py), minus skills already in the library (same
  pattern id, or cosine above ``dedup_threshold`` to an existing skill of the same kind).
* ``promote`` adds one candidate only when the caller's matched rollouts show a gain
  (``success_with − success_without > 0`` and ``>= min_gain``). If the env then holds more than
  ``max_skills`` skills, the lowest-utility ones are evicted (ties: fewer sources, then id), never the
  skill just promoted, and their links are removed from talents. Each promotion is a new library version.

``utility`` of a promoted skill is its measured gain; of a distilled skill the observational gain (see
distill_offline.py), so both estimate "success with minus without".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

import numpy as np

from ..config import LibraryConfig
from ..trajectories import Trajectory
from .common import require_train, usable
from .distill_offline import render_skill
from .mining import Miner, featurize, rank_key
from .schema import SkillRecord, TalentRecord
from .store import Library


@dataclass
class Candidate:
    skill: SkillRecord
    "The proposed skill (with its vector), not yet in the library."
    task_type: str
    "The weak task type it was mined for."
    reason: str
    "Why it was proposed (for logs)."


def propose_candidates(
    trajectories: Sequence[Trajectory],
    library: Library,
    env: str,
    *,
    cfg: Optional[LibraryConfig] = None,
    success_threshold: float = 0.5,
    max_candidates: int = 8,
) -> list[Candidate]:
    """Candidate skills for the task types where ``trajectories`` (training rollouts) succeed too rarely."""
    require_train(trajectories, "propose_candidates")
    cfg = cfg or library.cfg
    trajs, _ = usable(trajectories, env)
    if not trajs:
        return []
    rate = {tt: float(np.mean([t.success for t in trajs if t.task_type == tt])) for tt in sorted({t.task_type for t in trajs})}
    weak = {tt for tt, r in rate.items() if r < success_threshold}
    if not weak:
        return []
    mined = Miner([featurize(t, env, cfg.max_pattern_len) for t in trajs], cfg).mine()
    mined = [m for m in mined if m.kind in ("mistake", "specific") and weak & set(m.task_types)]
    mined.sort(key=lambda m: (m.kind != "mistake",) + rank_key(m))
    instead = {tt: m.pattern for m in mined if m.kind == "specific" for tt in m.task_types}
    existing = library.skills(env)
    have = {s.skill_id for s in existing}
    pairs = [(render_skill(env, m, instead), m) for m in mined]
    pairs = [(s, m) for s, m in pairs if s.skill_id not in have]
    if not pairs:
        return []
    vecs = library.embedder.encode([s.text() for s, _ in pairs])
    out: list[Candidate] = []
    for (s, m), v in zip(pairs, vecs):
        same_kind = [e for e in existing if e.kind == s.kind]
        if same_kind and float(np.max(np.asarray([e.vector for e in same_kind], np.float32) @ v)) > cfg.dedup_threshold:
            continue
        tt = sorted(weak & set(m.task_types))[0]
        side = "failures" if s.kind == "mistake" else "successes"
        out.append(Candidate(
            skill=replace(s, vector=[float(x) for x in v]), task_type=tt,
            reason=f"{tt} success {rate[tt]:.2f} < {success_threshold}; pattern in {m.support:.0%} of its {side}",
        ))
        if len(out) >= max_candidates:
            break
    return out


def promote(
    library: Library,
    candidate: Candidate,
    gain_with: float,
    gain_without: float,
    min_gain: float = 0.0,
    *,
    max_skills: Optional[int] = None,
    n_rollouts: int = 0,
) -> Optional[int]:
    """Add ``candidate`` if matched rollouts gained (success rate with vs without it); returns the new
    library version, or None when refused (no gain, below ``min_gain``, or already in the library)."""
    gain = float(gain_with) - float(gain_without)
    if not (gain > 0 and gain >= min_gain):
        return None
    env = candidate.skill.env
    latest = Library.open(library.uri, -1, cfg=library.cfg, embedder=library._embedder)
    skills = latest.skills(env)
    if any(s.skill_id == candidate.skill.skill_id for s in skills):
        return None
    new = replace(candidate.skill, success_with=float(gain_with), success_without=float(gain_without),
                  utility=round(gain, 6), n_used=int(n_rollouts))
    skills.append(new)
    cap = library.cfg.max_skills if max_skills is None else max_skills
    evicted: list[str] = []
    while len(skills) > cap:
        victim = min((s for s in skills if s.skill_id != new.skill_id), key=lambda s: (s.utility, len(s.source_traj_ids), s.skill_id))
        skills.remove(victim)
        evicted.append(victim.skill_id)
    gone = set(evicted)
    talents: list[TalentRecord] = []
    for t in latest.talents(env):
        keep = [(sid, w) for sid, w in zip(t.skill_ids, t.skill_weights) if sid not in gone]
        talents.append(replace(t, skill_ids=[k for k, _ in keep], skill_weights=[w for _, w in keep]))
    note = f"promote:{new.skill_id} gain={gain:.3f}" + (f" evict:{','.join(evicted)}" if evicted else "")
    version = library.commit(env, skills, talents, latest.labels(env), note=note)
    return version
