"""Policy prompts and action parsing (DESIGN.md §4).

Two sample kinds come out of a trajectory:
  * routing (step 0): task + talent menu → ``<talent>ID</talent>``
  * execution (steps 1..n): rules, task, retrieved skills, last ``h`` (obs, action) pairs, current
    observation, admissible actions, then the talent's strategy (last: next to the decision it should change)
    → ``<think>…</think><action>…</action>``
    (QA: ``<search>…</search>`` or ``<answer>…</answer>``, the Search-R1 protocol).

Skill and talent text is *data*: ``escape_data`` neutralises tags inside it so a skill that says
"<action>go north</action>" can never be parsed as the policy's action.

Each family's system rule, action parser and label syntax are its ``FamilySpec``'s (``envs/registry.py``): nothing
here branches on a family's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

from .envs.registry import FAMILIES, family_spec
from .envs.syntax import _last_tag, parse_action, parse_qa  # noqa: F401  (parse_action, parse_qa: public here too)

CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}
"""Passed to every ``apply_chat_template`` of the policy (prompts, SFT labels, RL samples). The agent reasons in its
own ``<think>`` inside the reply format, so a template's native thinking mode is off: Qwen3's template then puts its
empty ``<think></think>`` block into the generation prompt, and the label is exactly the reply the action trie
allows. Templates without the variable ignore it."""


def escape_data(text: str) -> str:
    """Make inserted text inert for the parsers: angle brackets become look-alike guillemets.

    >>> escape_data("use <action>go north</action>")
    'use ‹action›go north‹/action›'
    """
    return text.replace("<", "‹").replace(">", "›")


def parse_talent(completion: str) -> Optional[str]:
    """The id in the last ``<talent>`` tag; None when there is none.

    >>> parse_talent("<talent>T2</talent>")
    'T2'
    """
    found = _last_tag(completion, "talent")
    return (found.strip() or None) if found is not None else None


def parse_for_env(env: str, completion: str) -> Optional[str]:
    """The action of ``completion`` in ``env``'s syntax (the family's ``FamilySpec.parse``; ``<action>`` for a name no
    family registers)."""
    spec = FAMILIES.get(str(env))
    return (spec.parse if spec is not None else parse_action)(completion)


def rule_for(env: str) -> str:
    """The system rule of ``env``'s prompts (its ``FamilySpec.rule``); a KeyError names the families."""
    return family_spec(env).rule


class _Rules(Mapping[str, str]):
    """Family name → system rule, read live from the registry (``envs.registry.FAMILIES``) in its order."""

    def __getitem__(self, env: str) -> str:
        if str(env) not in FAMILIES:
            raise KeyError(env)
        return FAMILIES[str(env)].rule

    def __iter__(self) -> Iterator[str]:
        return iter(list(FAMILIES))

    def __len__(self) -> int:
        return len(FAMILIES)


RULES: Mapping[str, str] = _Rules()
"Every family's system rule (the tiny model's tokenizer reads them all, ``models.tokenizer_corpus``)."


@dataclass
class TalentView:
    talent_id: str
    name: str
    when_to_apply: str
    strategy: str = ""
    label: str = ""
    "The short id the routing menu shows (``T1``…``Tk``); the content-hash ``talent_id`` stays the key."

    @property
    def shown(self) -> str:
        return self.label or self.talent_id


def menu_choice(menu: Sequence[TalentView], shown: Optional[str]) -> Optional[str]:
    """The ``talent_id`` a routing answer names (its menu label, or the id itself); None when unknown.

    >>> menu_choice([TalentView("T-ab12", "Explore", "", label="T1")], "T1")
    'T-ab12'
    """
    for t in menu:
        if shown in (t.label, t.talent_id):
            return t.talent_id
    return None


def shown_id(menu: Sequence[TalentView], talent_id: str) -> str:
    """What the menu shows for ``talent_id`` (its label; the id itself when it is not on the menu)."""
    return next((t.shown for t in menu if t.talent_id == talent_id), talent_id)


@dataclass
class SkillView:
    skill_id: str
    kind: str
    title: str
    principle: str


def observation_text(observation: str, goal: str, n: int) -> str:
    """``observation`` on one line, without the goal (intro observations repeat it: it is shown once already), cut
    to ``n`` characters.

    >>> observation_text("Find the coin!  -= Hall =- A sign reads: east.", "Find the coin!", 30)
    '-= Hall =- A sign reads: east.'
    """
    o = " ".join(observation.split())
    goal = " ".join(goal.split())
    return _cut(o.replace(goal, "").strip() if goal else o, n)


def routing_view(goal: str, first_observation: str, obs_chars: int) -> str:
    """What the router sees of the first observation (``env.routing_obs_chars``; "" when 0): the same text at SFT,
    in RL and in evaluation."""
    return observation_text(first_observation or "", goal, obs_chars) if obs_chars > 0 else ""


def routing_prompt(env: str, goal: str, first_observation: str, menu: Sequence[TalentView], obs_chars: int) -> list[dict]:
    """The routing prompt of a task as SFT, RL and evaluation all build it: ``routing_messages`` over what the router
    sees of the first observation (``routing_view``)."""
    return routing_messages(env, goal, menu, routing_view(goal, first_observation, obs_chars))


def routing_messages(env: str, goal: str, menu: Sequence[TalentView], observation: str = "") -> list[dict]:
    """The routing prompt: the task, what the router sees of the first observation (``routing_view``), the menu."""
    lines = [f"{t.shown}: {escape_data(t.name)} — {escape_data(t.when_to_apply)}" for t in menu]
    seen = f"Obs: {observation}\n" if observation else ""
    user = f"Task: {goal}\n{seen}Choose a strategy:\n" + "\n".join(lines) + "\nReply with <talent>ID</talent>."
    return [{"role": "system", "content": rule_for(env)}, {"role": "user", "content": user}]


@dataclass
class ExecContext:
    env: str
    goal: str
    observation: str
    talent: Optional[TalentView] = None
    skills: Sequence[SkillView] = ()
    history: Sequence[tuple[str, str]] = ()
    "The last h (observation, action) pairs."
    actions: Sequence[str] = ()
    "Every action taken so far this episode (compact: tells the policy where it is in a multi-step plan)."
    admissible: Optional[Sequence[str]] = None
    obs_chars: int = 400
    extra_rules: str = ""
    meta: dict = field(default_factory=dict)
    memory: str = ""
    "The family's memory line (``env.memory``), empty without one."


MEMORY_LINES = {"page": "memory", "goal": "memory_goal", "goal_command": "memory_goal_command"}
"``EnvConfig.memory_mode`` → the ``FamilySpec`` field that writes that memory line."


MEMORY_SETTINGS = {"": "env.memory=false", "page": "env.memory=true env.memory_goal=false",
                   "goal": "env.memory=true env.memory_goal=true env.memory_values=text",
                   "goal_command": "env.memory=true env.memory_goal=true env.memory_values=command"}
"Each memory line (``EnvConfig.memory_mode``) and the settings that give it."


def prompt_settings(env_cfg) -> dict:
    """What a checkpoint's execution prompts were built with that a later run must build again
    (``talentrl_meta.json["prompt"]``, ``check_prompt_settings``): the memory line."""
    return {"memory": env_cfg.memory_mode}


def check_prompt_settings(env_cfg, checkpoint) -> None:
    """A ValueError naming the settings when ``checkpoint`` was trained (its ``talentrl_meta.json``) with another
    memory line than ``env_cfg`` builds: its prompts would otherwise differ, silently, from those it learnt on.
    A checkpoint without the record (a base model, a hub id, one written before it) passes."""
    from pathlib import Path

    from .io import read_json

    meta = Path(str(checkpoint)) / "talentrl_meta.json"
    trained = (read_json(meta).get("prompt") or {}).get("memory") if meta.is_file() else None
    if trained is None or trained == env_cfg.memory_mode:
        return
    raise ValueError(f"{checkpoint} was trained with the memory line {trained or 'none'!r} "
                     f"({MEMORY_SETTINGS.get(trained, '?')}); this run's settings give {env_cfg.memory_mode or 'none'!r}: "
                     f"set {MEMORY_SETTINGS.get(trained, '?')} to use it")


def exec_context(env: str, goal: str, observation: str, talent: Optional[TalentView], skills: Sequence[SkillView],
                 past: Sequence[tuple[str, str]], n_history: int, admissible: Optional[Sequence[str]],
                 obs_chars: int, memory: bool | str = False) -> ExecContext:
    """The execution prompt's context at one step, as SFT (``sft_data.execution_samples``) and the rollout loop both
    build it: the last ``n_history`` (observation, action) pairs of ``past``, every action so far and the family's
    memory line of the whole past: none for ``memory`` False or "", ``FamilySpec.memory`` for True or "page",
    ``FamilySpec.memory_goal`` for "goal", ``FamilySpec.memory_goal_command`` for "goal_command"
    (``EnvConfig.memory_mode``)."""
    spec = FAMILIES.get(str(env))
    mode = "page" if memory is True else (memory or "")
    fn = None if spec is None or not mode else getattr(spec, MEMORY_LINES[mode])
    line = fn(goal, past, observation, admissible) if fn is not None else ""
    return ExecContext(env=env, goal=goal, observation=observation, talent=talent, skills=skills, memory=line,
                       history=past[-n_history:] if n_history else (), admissible=admissible, obs_chars=obs_chars,
                       actions=[a for _, a in past])


def _cut(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def execution_messages(ctx: ExecContext) -> list[dict]:
    parts = [f"Task: {ctx.goal}"]
    if ctx.skills:
        parts.append("Skills:\n" + "\n".join(f"- [{s.kind}] {escape_data(s.title)}: {escape_data(s.principle)}" for s in ctx.skills))
    def obs_text(o: str, n: int) -> str:
        return observation_text(o, ctx.goal, n)

    if ctx.actions:
        parts.append("Actions so far: " + "; ".join(ctx.actions))
    for obs, act in ctx.history:
        parts.append(f"Obs: {obs_text(obs, ctx.obs_chars // 2)}\nAct: {act}")
    if ctx.memory:
        parts.append(ctx.memory)
    parts.append(f"Obs: {obs_text(ctx.observation, ctx.obs_chars)}")
    if ctx.admissible is not None:
        acts = [a for a in ctx.admissible if a not in ("look", "inventory")]
        parts.append("Admissible: " + ", ".join(acts))
    if ctx.talent is not None:  # last, next to the decision: what the talent says to do now
        parts.append(f"Strategy ({escape_data(ctx.talent.name)}): {escape_data(ctx.talent.strategy)}")
    system = rule_for(ctx.env) + (" " + ctx.extra_rules if ctx.extra_rules else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


def format_action(env: str, action: str, think: str = "") -> str:
    """The target completion for an expert action (SFT labels)."""
    prefix = f"<think>{think}</think>" if think else ""
    spec = FAMILIES.get(str(env))
    return prefix + (spec.wrap(action) if spec is not None else f"<action>{action}</action>")


def format_talent(talent_id: str) -> str:
    return f"<talent>{talent_id}</talent>"


@dataclass(frozen=True)
class RoutingCue:
    """"Recognise, then route" (issue 38, A2): the router first restates a cue it reads in what it sees of the task
    (``routing_view``), then names its talent: ``<cue>east</cue><talent>T1</talent>``. SFT may supervise the restated
    cue without the choice (``sft.routing_target=cue_only``), so that only RL's contrasts teach the cue → talent table.
    ``pattern`` (``env.routing_cue``) is a regular expression whose first group is the cue in the routing view;
    ``values`` (``env.routing_cue_values``) are the cues decoding may restate.

    >>> cue = RoutingCue(r"the coin lies (\\w+)", ("east", "north"))
    >>> cue.read("A sign on the wall reads: the coin lies north."), cue.read("nothing here")
    ('north', None)
    >>> cue.completions(["T1", "T2"])[:2]
    ['<cue>east</cue><talent>T1</talent>', '<cue>east</cue><talent>T2</talent>']
    >>> cue.split("<cue>north</cue><talent>T2</talent>")
    ('<cue>north</cue>', '<talent>T2</talent>')
    """

    pattern: str
    values: tuple[str, ...]

    def read(self, view: str) -> Optional[str]:
        m = re.search(self.pattern, view or "")
        return m.group(1) if m and m.group(1) in self.values else None

    @staticmethod
    def format(cue: str) -> str:
        return f"<cue>{cue}</cue>"

    def completions(self, shown: Sequence[str]) -> list[str]:
        """Every routing completion decoding allows: each cue, then each talent of the menu (cue-major)."""
        return [self.format(c) + format_talent(t) for c in self.values for t in shown]

    @staticmethod
    def split(completion: str) -> tuple[str, str]:
        """(the cue part, the talent part) of a routing completion."""
        at = completion.find("<talent>")
        return (completion[:at], completion[at:]) if at >= 0 else (completion, "")


def routing_cue(pattern: str, values: Sequence[str]) -> Optional[RoutingCue]:
    """The family's ``RoutingCue`` from ``env.routing_cue`` / ``env.routing_cue_values`` (None when unset)."""
    return RoutingCue(pattern, tuple(values)) if pattern else None


def routing_completions(shown: Sequence[str], cue: Optional[RoutingCue] = None) -> list[str]:
    """The routing completions constrained decoding allows: ``<talent>ID</talent>`` per menu talent, each behind
    every cue where the router restates one."""
    return cue.completions(shown) if cue is not None else [format_talent(t) for t in shown]
