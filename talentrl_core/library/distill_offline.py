"""The offline distiller: deterministic pattern mining over abstract actions, no teacher (DESIGN.md §3b).

1.-2. **Abstract** every step into a template and **mine** its general, specific and mistake patterns
   (``mining.py``: ``featurize``, ``Miner``).
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

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..config import LibraryConfig
from ..trajectories import Trajectory
from .cluster import choose_clusters
from .common import cut, goal_of, kind_counts, merge_near_duplicates, oracle_labels, usable
from .embed import TextEncoder
from .mining import Features, Mined, Miner, Pattern, featurize, procedure, rank_key
from .schema import KIND_PREFIX, LabelRecord, SkillRecord, TalentRecord, content_id
from .templates import INVALID, render_steps, render_token, short_verb, type_label, unmarked

_NAV_VERBS = {"go", "look", "inventory", "examine", "help", "wait"}


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
    for m in sorted((m for m in mined if m.kind == "specific"), key=rank_key):
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
