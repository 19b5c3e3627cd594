"""Steps 1-2 of the offline distiller (``distill_offline.py``): abstract every step, mine its patterns.

1. **Abstract** every step into a template (``templates.py``: entity names → placeholders), collapsing runs.
2. **Mine** contiguous patterns of 1..``max_pattern_len`` abstract steps. The *support* of a pattern in a
   task type is the share of that type's successful trajectories containing it (at least 2 of them when
   the type has 2 or more successes).
   * a pattern of >= 2 steps with support >= ``min_support`` in a type is frequent there;
   * **general** when frequent in at least max(2, ⌈n/2⌉) of the n task types that have successes;
     with a single task type, the frequent 2-step patterns are general and longer ones specific;
   * **specific** otherwise, for the type(s) where it is frequent;
   * **mistake** (types with failures): support among failures >= ``min_support`` and among successes
     <= ``min_support``/3 (patterns of 1 step allowed).
   Sub-patterns of a kept longer pattern with (almost) the same support are dropped (closed patterns),
   then the best ``max_per_kind`` per kind and task type are kept (general: 2× per env, and every type
   gets at least its best general pattern when it has one).

``utility`` of a skill is the observed success-rate difference between trajectories (of its task types)
that contain the pattern and those that do not (mistakes: the failure-rate difference); 0 without failures.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..config import LibraryConfig
from ..trajectories import Trajectory
from .common import MAX_SOURCES, goal_of
from .templates import SAME_REPEATED, coarsen, trajectory_tokens, unmarked

Pattern = tuple[str, ...]
CLOSED_TOLERANCE = 0.05
"A sub-pattern is redundant when a kept super-pattern's support is within this of its own."


@dataclass
class Features:
    traj: Trajectory
    seqs: list[tuple[list[str], list[str]]]
    "(tokens, concrete commands) per abstraction level: templates, then the coarse level if it differs."
    first: dict[Pattern, tuple[int, int]]
    "Every pattern in the trajectory → (level, start) of its first occurrence."

    def concrete(self, p: Pattern) -> str:
        level, i = self.first[p]
        return " → ".join(self.seqs[level][1][i : i + len(p)])


@dataclass
class Mined:
    pattern: Pattern
    kind: str
    task_types: list[str]
    support: float
    "Skills: share of successes with the pattern (mean over its types); mistakes: share of failures."
    contrast: float = 0.0
    "Mistakes: share of successes with the pattern."
    sources: list[str] = field(default_factory=list)
    example: str = ""
    goal: str = ""
    utility: float = 0.0


def featurize(t: Trajectory, env: str, max_len: int) -> Features:
    seqs = [trajectory_tokens(env, t.steps)]
    coarse = trajectory_tokens(env, t.steps, coarse=True)
    if coarse[0] != seqs[0][0]:
        seqs.append(coarse)
    first: dict[Pattern, tuple[int, int]] = {}
    for level, (tokens, _) in enumerate(seqs):
        for n in range(1, max_len + 1):
            for i in range(len(tokens) - n + 1):
                first.setdefault(tuple(tokens[i : i + n]), (level, i))
    return Features(t, seqs, first)


def _is_sub(p: Pattern, q: Pattern) -> bool:
    n = len(p)
    return n < len(q) and any(q[i : i + n] == p for i in range(len(q) - n + 1))


def _closed(cands: list[Mined]) -> list[Mined]:
    kept: list[Mined] = []
    for c in sorted(_prefer_fine(cands), key=lambda m: (-len(m.pattern), -m.support, m.pattern)):
        if any(_is_sub(c.pattern, k.pattern) and k.support >= c.support - CLOSED_TOLERANCE and set(c.task_types) <= set(k.task_types) for k in kept):
            continue
        kept.append(c)
    return kept


def _prefer_fine(cands: list[Mined]) -> list[Mined]:
    """Between a pattern and its coarse image (same length, ``coarsen`` per step), keep the fine one when
    it is (almost) as frequent, else the coarse one."""
    by_p = {m.pattern: m for m in cands}
    drop: set[Pattern] = set()
    for p, m in sorted(by_p.items()):
        c = tuple(coarsen(t) for t in p)
        if c != p and c in by_p:
            drop.add(c if m.support >= by_p[c].support - CLOSED_TOLERANCE else p)
    return [m for m in cands if m.pattern not in drop]


def rank_key(m: Mined, support: Optional[float] = None) -> tuple:
    s = m.support if support is None else support
    return (-round(s * (1 + 0.2 * (len(m.pattern) - 2)), 9), m.pattern)


class Miner:
    """Pattern statistics of one env's trajectories, grouped by task type."""

    def __init__(self, feats: Sequence[Features], cfg: LibraryConfig):
        self.cfg = cfg
        self.feats = list(feats)
        self.types = sorted({f.traj.task_type for f in feats})
        self.S = {tt: [f for f in feats if f.traj.task_type == tt and f.traj.success] for tt in self.types}
        self.F = {tt: [f for f in feats if f.traj.task_type == tt and not f.traj.success] for tt in self.types}
        self.sc = {tt: Counter(p for f in self.S[tt] for p in f.first) for tt in self.types}
        self.fc = {tt: Counter(p for f in self.F[tt] for p in f.first) for tt in self.types}
        self.succ_types = [tt for tt in self.types if self.S[tt]]

    def share(self, counts: Counter, group: list, p: Pattern) -> float:
        return counts[p] / len(group) if group else 0.0

    def frequent(self, tt: str) -> dict[Pattern, float]:
        group = self.S[tt]
        need = min(2, len(group))
        return {
            p: c / len(group)
            for p, c in self.sc[tt].items()
            if len(p) >= 2 and c >= need and c / len(group) >= self.cfg.min_support
        }

    def _finish(self, m: Mined, success_side: bool) -> Mined:
        pool = [f for tt in m.task_types for f in (self.S[tt] if success_side else self.F[tt]) if m.pattern in f.first]
        pool.sort(key=lambda f: f.traj.traj_uid)
        m.sources = [f.traj.traj_uid for f in pool][:MAX_SOURCES]
        if pool:
            m.example = pool[0].concrete(m.pattern)
            m.goal = goal_of(pool[0].traj)
        every = [f for tt in m.task_types for f in self.S[tt] + self.F[tt]]
        base = float(np.mean([f.traj.success for f in every])) if every else 0.0
        w = [f.traj.success for f in every if m.pattern in f.first]
        wo = [f.traj.success for f in every if m.pattern not in f.first]
        gain = (float(np.mean(w)) if w else base) - (float(np.mean(wo)) if wo else base)
        m.utility = round(gain if success_side else -gain, 6)
        return m

    def mine(self) -> list[Mined]:
        cfg = self.cfg
        freq = {tt: self.frequent(tt) for tt in self.succ_types}
        n_types = len(self.succ_types)
        general_min = max(2, math.ceil(n_types / 2))
        general: list[Mined] = []
        specific: dict[Pattern, Mined] = {}
        for p in sorted({p for tt in freq for p in freq[tt]}):
            tts = [tt for tt in self.succ_types if p in freq[tt]]
            sup = float(np.mean([freq[tt][p] for tt in tts]))
            is_general = len(tts) >= general_min if n_types >= 2 else len(p) == 2
            if is_general:
                general.append(Mined(p, "general", tts, sup))
            else:
                specific[p] = Mined(p, "specific", tts, sup)
        # general: closed, ranked by breadth then support, capped per env; every type keeps its best one
        general = _closed(general)
        general.sort(key=lambda m: (-len(m.task_types),) + rank_key(m))
        chosen = general[: 2 * cfg.max_per_kind]
        for tt in self.succ_types:
            if not any(tt in m.task_types for m in chosen):
                best = [m for m in general if tt in m.task_types]
                if best:
                    chosen.append(best[0])
        out = [self._finish(m, True) for m in chosen]
        # specific: closed and capped per task type
        spec_keep: dict[Pattern, Mined] = {}
        for tt in self.succ_types:
            cands = [Mined(m.pattern, "specific", m.task_types, freq[tt][m.pattern]) for m in specific.values() if tt in m.task_types]
            for m in sorted(_closed(cands), key=rank_key)[: cfg.max_per_kind]:
                spec_keep.setdefault(m.pattern, specific[m.pattern])
        out += [self._finish(m, True) for m in sorted(spec_keep.values(), key=rank_key)]
        # mistakes: frequent in failures, rare in successes
        mistakes: dict[Pattern, Mined] = {}
        for tt in self.types:
            fails, succ = self.F[tt], self.S[tt]
            if not fails:
                continue
            need = min(2, len(fails))
            cands = []
            for p, c in self.fc[tt].items():
                pf = c / len(fails)
                ps = self.share(self.sc[tt], succ, p)
                if c >= need and pf >= cfg.min_support and ps <= cfg.min_support / 3:
                    cands.append(Mined(p, "mistake", [tt], pf, contrast=ps))
            cands = _closed(cands)
            cands.sort(key=lambda m: (-round(m.support - m.contrast, 9), len(m.pattern), m.pattern))
            for m in cands[: cfg.max_per_kind]:
                if m.pattern in mistakes:
                    old = mistakes[m.pattern]
                    old.task_types = sorted(set(old.task_types) | {tt})
                    old.support = max(old.support, m.support)
                    old.contrast = max(old.contrast, m.contrast)
                else:
                    mistakes[m.pattern] = m
        ranked = sorted(mistakes.values(), key=lambda m: (-round(m.support - m.contrast, 9), len(m.pattern), m.pattern))
        out += [self._finish(m, False) for m in ranked]
        return out  # in rank order within each kind: near-duplicate merging keeps the first


def procedure(pattern: Pattern) -> Pattern:
    """What a pattern tells the agent to do, without how often: repetition marks dropped, runs collapsed. Skills
    merge as near-duplicates only when this is equal (``common.merge_near_duplicates``).

    >>> procedure(("go north" + SAME_REPEATED, "go east", "take {obj}")) == procedure(("go north", "go east", "take {obj}"))
    True
    >>> procedure(("go north", "go east")) == procedure(("go north", "go west"))
    False
    """
    out: list[str] = []
    for tok in map(unmarked, pattern):
        if not out or out[-1] != tok:
            out.append(tok)
    return tuple(out)
