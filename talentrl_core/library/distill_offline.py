"""The offline distiller: deterministic pattern mining over abstract actions, no teacher (DESIGN.md §3b).

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
3. **Render** text from the templates (title, principle, when_to_apply, a concrete example), **embed**,
   and merge near-duplicates (cosine > ``dedup_threshold``, same kind).
4. **Talents**: successful trajectories become idf-weighted binary signatures over the kept general and
   specific skills; seeded spherical k-means groups them (k fixed by ``n_talents``, or the k in 3..8 with
   the highest mean cosine silhouette — cluster.py). Trajectories of two or more strategy experts form one
   talent per strategy instead, with the clustering's agreement with the strategies reported (``talent_groups``). A talent links the skills present in at least
   ``min_support`` of its members, weighted by that share; its name comes from its most distinctive
   pattern. Each member trajectory is labelled with its cluster's talent; the oracle talent of a task type
   is the one most of its successes follow.

``utility`` of a skill is the observed success-rate difference between trajectories (of its task types)
that contain the pattern and those that do not (mistakes: the failure-rate difference); 0 without failures.
Ids are content hashes, every loop runs over sorted keys and clustering is seeded: two runs on the same
trajectories give identical rows.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..config import LibraryConfig
from ..trajectories import Trajectory
from .cluster import choose_clusters
from .common import MAX_SOURCES, cut, goal_of, kind_counts, merge_near_duplicates, oracle_labels, usable
from .embed import TextEncoder
from .schema import KIND_PREFIX, LabelRecord, SkillRecord, TalentRecord, content_id
from .templates import INVALID, SAME_REPEATED, coarsen, render_steps, render_token, short_verb, trajectory_tokens, type_label, unmarked

Pattern = tuple[str, ...]
CLOSED_TOLERANCE = 0.05
"A sub-pattern is redundant when a kept super-pattern's support is within this of its own."
_NAV_VERBS = {"go", "look", "inventory", "examine", "help", "wait"}


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


def _rank_key(m: Mined, support: Optional[float] = None) -> tuple:
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
        general.sort(key=lambda m: (-len(m.task_types),) + _rank_key(m))
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
            for m in sorted(_closed(cands), key=_rank_key)[: cfg.max_per_kind]:
                spec_keep.setdefault(m.pattern, specific[m.pattern])
        out += [self._finish(m, True) for m in sorted(spec_keep.values(), key=_rank_key)]
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


# ---------------------------------------------------------------------------------------------- text


def _pct(x: float) -> str:
    return f"{round(100 * x)}%"


def _types_phrase(tts: Sequence[str]) -> str:
    labels = [type_label(t) for t in tts]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _sentence(pattern: Pattern) -> str:
    s = render_steps(pattern)
    return s[:1].upper() + s[1:]


def _title(pattern: Pattern) -> str:
    t = " → ".join(short_verb(tok) for tok in pattern)
    return t[:1].upper() + t[1:]


def render_skill(env: str, m: Mined, instead: dict[str, Pattern]) -> SkillRecord:
    p = m.pattern
    types = _types_phrase(m.task_types)
    goal = f' e.g. "{cut(m.goal, 100).rstrip(".")}"' if m.goal else ""
    if m.kind == "specific":
        title = _title(p)
        principle = f"{_sentence(p)}. Seen in {_pct(m.support)} of successful {types} runs."
        when = f"For {types} tasks" + (f" ({goal.strip()})." if goal else ".")
    elif m.kind == "general":
        title = _title(p)
        principle = f"{_sentence(p)}. Seen in successful runs of {len(m.task_types)} task types ({types})."
        when = f"Whenever the next step is to {render_token(p[0])}."
    else:
        title = "Avoid: " + _title(p)
        alt = instead.get(m.task_types[0])
        principle = (
            f"Failed {types} runs often do this: {render_steps(p)} ({_pct(m.support)} of failures, "
            f"{_pct(m.contrast)} of successes). Do not repeat it"
            + (f"; instead: {render_steps(alt)}." if alt else ".")
        )
        when = f"In {types} tasks, when about to {render_token(p[0])}."
    sid = content_id(KIND_PREFIX[m.kind], env, m.kind, *p)
    return SkillRecord(
        skill_id=sid, env=env, kind=m.kind, task_types=sorted(m.task_types), title=title, principle=principle,
        when_to_apply=when, example=m.example, source_traj_ids=list(m.sources), utility=m.utility,
    )


def _verb_name(pattern: Pattern) -> str:
    """A talent name from the verbs of a pattern (navigation left out, consecutive repeats merged).

    >>> _verb_name(("go to {recep}", "take {obj} from {recep}", "go to {recep}", "heat {obj} with {recep}"))
    'Take-Heat'
    >>> _verb_name(("go {dir} [repeated]", "take {obj}")), _verb_name(("search {query} [repeated]", "answer"))
    ('Explore-Take', 'Search×n-Answer')
    """
    words: list[str] = []
    explored = False
    for tok in pattern:
        base = unmarked(tok)
        if base == INVALID:
            continue
        verb = base.split()[0]
        if verb in _NAV_VERBS:
            explored = explored or verb == "go"
            continue
        w = verb.capitalize() + ("×n" if tok != base else "")
        if not words or words[-1] != w:
            words.append(w)
    if explored and len(words) <= 1:
        words.insert(0, "Explore")
    return "-".join(words) if words else "Explore"


# ---------------------------------------------------------------------------------------------- talents


def talent_groups(M: np.ndarray, rows: np.ndarray, idf: np.ndarray, strategy: Sequence[Optional[str]],
                  cfg: LibraryConfig) -> tuple[np.ndarray, np.ndarray, dict]:
    """Which successful trajectories form each talent: (row indices, group per row, report).

    Without strategy experts: seeded spherical k-means over the rows with a skill pattern (``cluster.py``).
    With two or more strategies: one talent per strategy over every successful strategy trajectory. The
    clustering still runs with k = the number of strategies and its agreement with them (purity, NMI) is
    reported: whether the action patterns alone would have found the strategies (on a hidden-route chain,
    exploring walks the same straight line as following does, so they cannot everywhere).
    """
    names = sorted({s for s in strategy if s})
    if len(names) < 2:
        labels, report = choose_clusters(M[rows] * idf, cfg.n_talents, (3, 8), cfg.seed)
        return rows, labels, report
    from .strategy_labels import agreement

    clusters, creport = choose_clusters(M[rows] * idf, len(names), (3, 8), cfg.seed)
    tagged = [j for j, i in enumerate(rows) if strategy[i]]
    creport["strategy_agreement"] = {k: v for k, v in agreement(
        [strategy[rows[j]] for j in tagged], [f"c{clusters[j]}" for j in tagged]).items() if k != "contingency"}
    groups = np.flatnonzero([bool(s) for s in strategy])
    labels = np.array([names.index(strategy[i]) for i in groups])
    return groups, labels, {"k": len(names), "criterion": "one talent per strategy expert", "clustering": creport}


def build_talents(
    env: str, feats: Sequence[Features], skills: Sequence[SkillRecord], patterns: dict[str, set[Pattern]],
    main_pattern: dict[str, Pattern], cfg: LibraryConfig,
) -> tuple[list[TalentRecord], list[LabelRecord], dict]:
    feat_skills = sorted((s for s in skills if s.kind != "mistake"), key=lambda s: s.skill_id)
    mistakes = sorted((s for s in skills if s.kind == "mistake"), key=lambda s: s.skill_id)
    succ = sorted((f for f in feats if f.traj.success), key=lambda f: (f.traj.task_type, f.traj.traj_uid))
    if not feat_skills or not succ:
        return [], [], {"k": 0, "criterion": "no successful trajectories or no skills"}
    M = np.array([[any(p in f.first for p in patterns[s.skill_id]) for s in feat_skills] for f in succ], dtype=np.float64)  # (n_succ, n_skills)
    idf = np.log((1 + len(succ)) / (1 + M.sum(0))) + 1.0
    rows = np.flatnonzero(M.sum(1) > 0)
    if rows.size == 0:
        return [], [], {"k": 0, "criterion": "no trajectory contains a skill pattern"}
    rows, labels, report = talent_groups(M, rows, idf, [f.traj.strategy for f in succ], cfg)
    talents: list[TalentRecord] = []
    traj_labels: list[LabelRecord] = []
    names: Counter = Counter()
    drafts = []
    for c in range(int(labels.max()) + 1):
        members = rows[labels == c]
        others = np.setdiff1d(rows, members)
        freq = M[members].mean(0)
        lift = freq - (M[others].mean(0) if others.size else 0.0)
        links = [(feat_skills[j].skill_id, round(float(freq[j]), 6)) for j in np.flatnonzero(freq >= cfg.min_support)]
        if not links:
            links = [(feat_skills[j].skill_id, round(float(freq[j]), 6)) for j in np.argsort(-freq, kind="stable")[:3] if freq[j] > 0]
        links.sort(key=lambda kv: (-kv[1], kv[0]))
        linked = {sid for sid, _ in links}
        cand = [j for j in range(len(feat_skills)) if feat_skills[j].skill_id in linked]
        top = min(cand, key=lambda j: (-round(lift[j], 9), -round(freq[j], 9), feat_skills[j].kind != "specific", feat_skills[j].skill_id), default=None)
        types = Counter(succ[i].traj.task_type for i in members)
        name = _verb_name(main_pattern[feat_skills[top].skill_id]) if top is not None else "Explore"
        names[name] += 1
        drafts.append((members, links, types, name, succ[members[0]]))
    used: set[str] = set()
    for members, links, types, name, first in drafts:
        dom = sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))
        if names[name] > 1:
            name = f"{name} ({type_label(dom[0][0])})"
        base, i = name, 2
        while name in used:
            name, i = f"{base} #{i}", i + 1
        used.add(name)
        by_id = {s.skill_id: s for s in feat_skills}
        order = sorted(links, key=lambda kv: (by_id[kv[0]].kind != "specific", -kv[1], kv[0]))[:3]
        steps = "; ".join(f"{n}) {render_steps(main_pattern[sid])}" for n, (sid, _) in enumerate(order, 1))
        links = sorted(links + mistake_links(types, mistakes, cfg.min_support), key=lambda kv: (-kv[1], kv[0]))
        strategy = f"Typical order of work: {steps}."
        shares = ", ".join(f"{type_label(t)} ({n} runs)" for t, n in dom[:3])
        goal = goal_of(first.traj)
        when = f"Tasks like {shares}" + (f'; e.g. "{cut(goal, 100).rstrip(".")}".' if goal else ".")
        tid = content_id("T", env, name, *(f"{sid}:{w}" for sid, w in links))
        talents.append(TalentRecord(
            talent_id=tid, env=env, name=name, strategy=strategy, when_to_apply=when,
            skill_ids=[sid for sid, _ in links], skill_weights=[w for _, w in links],
        ))
        for i in members:
            t = succ[i].traj
            traj_labels.append(LabelRecord(env=env, task_type=t.task_type, talent_id=tid, kind="traj", traj_uid=t.traj_uid, task_id=t.task_id))
    report["n_clustered"] = int(rows.size)
    return talents, traj_labels, report


def mistake_links(types: Counter, mistakes: Sequence[SkillRecord], min_support: float) -> list[tuple[str, float]]:
    """A talent's links to the pitfalls of the tasks it solves: each mistake weighted by the share of the talent's
    trajectories whose task type the mistake was seen in, kept from ``min_support``. Without them every talent
    retrieved the same mistake by goal similarity, whose "instead: …" could contradict the talent (the fork: "instead
    … go west" under the Northeast talent too; docs/talents.md §14).

    >>> from collections import Counter
    >>> m = [SkillRecord(skill_id="M-e", env="tw", kind="mistake", task_types=["east"], title="", principle=""),
    ...      SkillRecord(skill_id="M-w", env="tw", kind="mistake", task_types=["west"], title="", principle="")]
    >>> mistake_links(Counter({"east": 9, "west": 1}), m, 0.2)
    [('M-e', 0.9)]
    """
    n = sum(types.values())
    out = []
    for m in mistakes:
        w = sum(c for t, c in types.items() if t in m.task_types) / n if n else 0.0
        if w >= min_support:
            out.append((m.skill_id, round(w, 6)))
    return out


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


# ---------------------------------------------------------------------------------------------- entry


@dataclass
class DistillResult:
    skills: list[SkillRecord]
    talents: list[TalentRecord]
    labels: list[LabelRecord]
    report: dict


def distill_offline(trajectories: Sequence[Trajectory], cfg: LibraryConfig, env: str, embedder: TextEncoder) -> DistillResult:
    """Mine skills, mistakes and talents from ``env``'s trajectories (see the module docstring)."""
    trajs, report = usable(trajectories, env)
    feats = [featurize(t, env, cfg.max_pattern_len) for t in trajs]
    mined = Miner(feats, cfg).mine()
    instead: dict[str, Pattern] = {}
    for m in sorted((m for m in mined if m.kind == "specific"), key=_rank_key):
        for tt in m.task_types:
            instead.setdefault(tt, m.pattern)
    raw = [render_skill(env, m, instead) for m in mined]
    pattern_of = {s.skill_id: m.pattern for s, m in zip(raw, mined)}
    vecs = embedder.encode([s.text() for s in raw]) if raw else np.zeros((0, 1), np.float32)
    skills, remap = merge_near_duplicates(raw, vecs, cfg.dedup_threshold, [procedure(m.pattern) for m in mined])
    patterns: dict[str, set[Pattern]] = {}
    for old, new in remap.items():
        patterns.setdefault(new, set()).add(pattern_of[old])
    main_pattern = {s.skill_id: pattern_of[s.skill_id] for s in skills}
    talents, traj_labels, creport = build_talents(env, feats, skills, patterns, main_pattern, cfg)
    labels = traj_labels + oracle_labels(env, traj_labels)
    n_succ = report["n_success"]
    report.update({
        "distiller": "offline",
        "skills": kind_counts(skills, sorted({t.task_type for t in trajs})),
        "dedup_merged": len(raw) - len(skills),
        "n_talents": len(talents),
        "talent_clustering": creport,
        "label_coverage": round(len(traj_labels) / n_succ, 6) if n_succ else 0.0,
        "oracle": {l.task_type: l.talent_id for l in labels if l.kind == "oracle"},
    })
    return DistillResult(skills, talents, labels, report)
