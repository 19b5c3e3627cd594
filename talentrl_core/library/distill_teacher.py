"""The LLM-teacher distiller (DESIGN.md §3a): prompts per env and task type, validated JSON answers.

Order of prompts (each answer is one JSON object, validated with pydantic; an unusable answer is counted
and skipped, never stored):

1. one **general** prompt per env — successful episodes of every task type → skills useful everywhere;
2. one **specific** prompt per task type — that type's successful episodes → its procedures;
3. one **mistakes** prompt per task type with failures — failed episodes (and a few successes for contrast);
4. skills are embedded and near-duplicates merged, then one **talents** prompt lists the skill ids and asks
   for named strategies with weighted links (unknown ids are dropped and counted).

Routing labels: each successful trajectory gets the talent nearest (cosine) to its summary (goal +
abstract actions); the oracle talent of a task type is the one most of its successes get.
Episodes shown in a prompt are the first ``teacher_max_trajs`` by (task type, traj_uid): deterministic.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Annotated, Callable, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..config import LibraryConfig
from ..envs.registry import FAMILIES
from ..trajectories import Trajectory
from .common import MAX_SOURCES, cut, goal_of, kind_counts, merge_near_duplicates, oracle_labels, usable
from .distill_offline import DistillResult, mistake_links
from .embed import TextEncoder, default_cache_dir
from .schema import KIND_PREFIX, LabelRecord, SkillRecord, TalentRecord, content_id
from .teacher_client import OpenAIChat, ResponseCache, Teacher
from .templates import trajectory_tokens, type_label

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=600)]
LongText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=10, max_length=1500)]


class SkillItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=120)]
    principle: LongText
    when_to_apply: Text
    example: Annotated[str, StringConstraints(strip_whitespace=True, max_length=600)] = ""


class SkillsAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    skills: list[SkillItem] = Field(min_length=1, max_length=20)


class Link(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=40)]
    weight: float = Field(ge=0.0, le=1.0)


class TalentItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=3, max_length=80)]
    strategy: LongText
    when_to_apply: Text
    skills: list[Link] = Field(min_length=1, max_length=40)


class TalentsAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    talents: list[TalentItem] = Field(min_length=1, max_length=12)


def extract_json(text: str) -> dict:
    """The JSON object in a reply (code fences and surrounding prose tolerated).

    >>> extract_json('Sure! ```json\\n{"a": 1}\\n```')
    {'a': 1}
    """
    t = re.sub(r"```(?:json)?", "", text or "")
    i, j = t.find("{"), t.rfind("}")
    if i < 0 or j <= i:
        raise ValueError("no JSON object in the answer")
    try:
        obj = json.loads(t[i : j + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to be a skill or talent list") from None
    if not isinstance(obj, dict):
        raise ValueError("the answer is not a JSON object")
    return obj


def env_description(env: str) -> str:
    """What the teacher is told about ``env``: its family's ``FamilySpec.description`` (the name itself when no family
    registers it)."""
    spec = FAMILIES.get(str(env))
    return spec.description if spec is not None else env


SYSTEM = (
    "You distil reusable know-how for an LLM agent from its past episodes. Write skills that transfer to new "
    "episodes: use placeholders such as {obj} and {recep} instead of specific entity names. Reply with one "
    "JSON object and nothing else."
)
SKILL_SCHEMA = (
    '{"skills": [{"title": "short name", "principle": "what to do, imperative, 1-2 sentences", '
    '"when_to_apply": "the situation", "example": "a concrete action sequence from the episodes"}]}'
)
TALENT_SCHEMA = (
    '{"talents": [{"name": "short strategy name", "strategy": "how to approach the task, 1-3 sentences", '
    '"when_to_apply": "which tasks", "skills": [{"id": "<skill id from the list>", "weight": 0.0-1.0}]}]}'
)


def summarise(t: Trajectory, max_actions: int = 30) -> str:
    acts = [s.action or "(invalid)" for s in t.env_steps()]
    more = f" | ... ({len(acts) - max_actions} more)" if len(acts) > max_actions else ""
    return (
        f"- Goal: {cut(goal_of(t), 200)}\n  Outcome: {'success' if t.success else 'failure'} (reward {t.final_reward:g})\n"
        f"  Actions: {' | '.join(acts[:max_actions])}{more}"
    )


def _messages(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def general_prompt(env: str, shown: Sequence[Trajectory]) -> list[dict]:
    types = ", ".join(sorted({t.task_type for t in shown}))
    return _messages(
        f"Environment: {env_description(env)}\nTask types: {types}\n\nSuccessful episodes:\n"
        + "\n".join(summarise(t) for t in shown)
        + f"\n\nWrite 3-8 GENERAL skills: procedures that help in every task type of this environment.\nJSON: {SKILL_SCHEMA}"
    )


def specific_prompt(env: str, task_type: str, shown: Sequence[Trajectory]) -> list[dict]:
    return _messages(
        f"Environment: {env_description(env)}\nTask type: {task_type}\n\nSuccessful episodes:\n"
        + "\n".join(summarise(t) for t in shown)
        + f"\n\nWrite 2-6 TASK-SPECIFIC skills for {task_type} tasks: the procedures that made these episodes succeed.\nJSON: {SKILL_SCHEMA}"
    )


def mistakes_prompt(env: str, task_type: str, failures: Sequence[Trajectory], successes: Sequence[Trajectory]) -> list[dict]:
    contrast = ("\n\nSuccessful episodes for contrast:\n" + "\n".join(summarise(t) for t in successes)) if successes else ""
    return _messages(
        f"Environment: {env_description(env)}\nTask type: {task_type}\n\nFailed episodes:\n"
        + "\n".join(summarise(t) for t in failures) + contrast
        + "\n\nWrite 1-5 MISTAKES to avoid in these tasks: the title names the mistake, the principle says how to "
        f"avoid it, when_to_apply says when it tends to happen.\nJSON: {SKILL_SCHEMA}"
    )


def talents_prompt(env: str, skills: Sequence[SkillRecord], task_types: Sequence[str]) -> list[dict]:
    lines = [f"{s.skill_id} [{s.kind}] ({', '.join(s.task_types)}): {s.title}" for s in skills]
    return _messages(
        f"Environment: {env_description(env)}\nTask types: {', '.join(task_types)}\n\nSkills (id [kind] (task types): title):\n"
        + "\n".join(lines)
        + "\n\nGroup these skills into 2-6 TALENTS: named high-level strategies an agent chooses before it starts a "
        "task. Each talent lists the skills it relies on by id, with a weight in [0, 1] (1 = essential).\n"
        f"JSON: {TALENT_SCHEMA}"
    )


def _skills_from(answer: Optional[SkillsAnswer], env: str, kind: str, task_types: list[str], shown: Sequence[Trajectory]) -> list[SkillRecord]:
    if answer is None:
        return []
    out: dict[str, SkillRecord] = {}
    for it in answer.skills:
        sid = content_id(KIND_PREFIX[kind], env, kind, it.title.lower(), it.principle)
        out.setdefault(sid, SkillRecord(
            skill_id=sid, env=env, kind=kind, task_types=sorted(task_types), title=it.title, principle=it.principle,
            when_to_apply=it.when_to_apply, example=it.example, source_traj_ids=sorted(t.traj_uid for t in shown)[:MAX_SOURCES],
        ))
    return list(out.values())


def teacher_for(cfg: LibraryConfig, generator: Optional[Callable[[list[dict]], str]] = None) -> Teacher:
    gen = generator or OpenAIChat(
        cfg.teacher_base_url, cfg.teacher_model, cfg.teacher_api_key_env, cfg.teacher_timeout_s,
        cfg.teacher_retries, cfg.teacher_backoff_s, cfg.teacher_temperature,
    )
    cache = ResponseCache(cfg.teacher_cache or default_cache_dir(cfg.uri, "teacher_cache"))
    return Teacher(gen, cache, cfg.teacher_temperature)


def distill_teacher(
    trajectories: Sequence[Trajectory], cfg: LibraryConfig, env: str, embedder: TextEncoder,
    generator: Optional[Callable[[list[dict]], str]] = None, teacher: Optional[Teacher] = None,
) -> DistillResult:
    trajs, report = usable(trajectories, env)
    teacher = teacher or teacher_for(cfg, generator)
    n = cfg.teacher_max_trajs
    types = sorted({t.task_type for t in trajs})
    succ = {tt: [t for t in trajs if t.task_type == tt and t.success] for tt in types}
    fail = {tt: [t for t in trajs if t.task_type == tt and not t.success] for tt in types}
    raw: list[SkillRecord] = []
    # 1. general: round-robin over task types so every type is shown
    pools = [succ[tt] for tt in types if succ[tt]]
    shown = [p[i] for i in range(max((len(p) for p in pools), default=0)) for p in pools if i < len(p)][:n]
    if shown:
        ans = teacher.ask(general_prompt(env, shown), lambda s: SkillsAnswer.model_validate(extract_json(s)), "general")
        raw += _skills_from(ans, env, "general", [tt for tt in types if succ[tt]], shown)
    # 2. specific per task type, 3. mistakes per task type with failures
    for tt in types:
        if succ[tt]:
            ans = teacher.ask(specific_prompt(env, tt, succ[tt][:n]), lambda s: SkillsAnswer.model_validate(extract_json(s)), f"specific {tt}")
            raw += _skills_from(ans, env, "specific", [tt], succ[tt][:n])
        if fail[tt]:
            ans = teacher.ask(mistakes_prompt(env, tt, fail[tt][:n], succ[tt][:2]), lambda s: SkillsAnswer.model_validate(extract_json(s)), f"mistakes {tt}")
            raw += _skills_from(ans, env, "mistake", [tt], fail[tt][:n])
    seen: set[str] = set()
    raw = [s for s in raw if not (s.skill_id in seen or seen.add(s.skill_id))]
    vecs = embedder.encode([s.text() for s in raw]) if raw else np.zeros((0, 1), np.float32)
    skills, _ = merge_near_duplicates(raw, vecs, cfg.dedup_threshold)
    # 4. talents over the final skill ids
    talents: list[TalentRecord] = []
    dropped = (0, 0)
    if skills:
        ans = teacher.ask(talents_prompt(env, skills, types), lambda s: TalentsAnswer.model_validate(extract_json(s)), "talents")
        talents, dropped = talents_from(ans, env, {s.skill_id for s in skills})
    traj_labels = nearest_talent_labels(env, talents, [t for tt in types for t in succ[tt]], embedder)
    link_own_mistakes(talents, traj_labels, skills, cfg.min_support)
    labels = traj_labels + oracle_labels(env, traj_labels)
    n_succ = report["n_success"]
    report.update({
        "distiller": "teacher",
        "teacher": {**teacher.report(), "dropped_links": dropped[0], "dropped_talents": dropped[1]},
        "skills": kind_counts(skills, types),
        "dedup_merged": len(raw) - len(skills),
        "n_talents": len(talents),
        "label_coverage": round(len(traj_labels) / n_succ, 6) if n_succ else 0.0,
        "oracle": {l.task_type: l.talent_id for l in labels if l.kind == "oracle"},
    })
    return DistillResult(skills, talents, labels, report)


def talents_from(ans: Optional[TalentsAnswer], env: str, ids: set[str]) -> tuple[list[TalentRecord], tuple[int, int]]:
    """The teacher's talents with their links to known skill ids (unknown ids dropped, a talent left with none
    dropped, a repeated talent kept once), and (dropped links, dropped talents)."""
    talents: list[TalentRecord] = []
    dropped_links = dropped_talents = 0
    for it in (ans.talents if ans else []):
        links: dict[str, float] = {}
        for l in it.skills:
            if l.id in ids:
                links[l.id] = max(links.get(l.id, 0.0), round(l.weight, 6))
            else:
                dropped_links += 1
        if not links:
            dropped_talents += 1
            continue
        tid = content_id("T", env, it.name, it.strategy)
        if any(t.talent_id == tid for t in talents):
            continue
        talent = TalentRecord(talent_id=tid, env=env, name=it.name, strategy=it.strategy, when_to_apply=it.when_to_apply)
        set_links(talent, links)
        talents.append(talent)
    return talents, (dropped_links, dropped_talents)


def nearest_talent_labels(env: str, talents: list[TalentRecord], winners: Sequence[Trajectory],
                          embedder: TextEncoder) -> list[LabelRecord]:
    """Each successful trajectory's routing label: the talent nearest (cosine) to its summary (goal + abstract
    actions). Sets the talents' vectors."""
    out: list[LabelRecord] = []
    if not (talents and winners):
        return out
    tv = embedder.encode([t.text() for t in talents])
    for t, v in zip(talents, tv):
        t.vector = [float(x) for x in v]
    qs = [f"{goal_of(t)} {' '.join(trajectory_tokens(env, t.steps, coarse=True)[0])}" for t in winners]
    cos = embedder.encode(qs) @ tv.T  # (n_success, n_talents)
    for t, row in zip(winners, cos):
        best = talents[int(np.lexsort((np.arange(len(talents)), -row))[0])]
        out.append(LabelRecord(env=env, task_type=t.task_type, talent_id=best.talent_id, kind="traj",
                               traj_uid=t.traj_uid, task_id=t.task_id))
    return out


def link_own_mistakes(talents: list[TalentRecord], traj_labels: Sequence[LabelRecord], skills: Sequence[SkillRecord],
                      min_support: float) -> None:
    """Add to each talent the mistakes of the task types of the trajectories labelled with it, as offline talents
    link them (``distill_offline.mistake_links``); a mistake the teacher linked keeps the teacher's weight."""
    mistakes = [s for s in skills if s.kind == "mistake"]
    for t in talents:
        types = Counter(l.task_type for l in traj_labels if l.talent_id == t.talent_id)
        links = dict(zip(t.skill_ids, t.skill_weights))
        for sid, w in mistake_links(types, mistakes, min_support):
            links.setdefault(sid, w)
        set_links(t, links)


def set_links(talent: TalentRecord, links: dict[str, float]) -> None:
    """The talent's skill links, heaviest first (ties by id)."""
    order = sorted(links.items(), key=lambda kv: (-kv[1], kv[0]))
    talent.skill_ids, talent.skill_weights = [k for k, _ in order], [w for _, w in order]
