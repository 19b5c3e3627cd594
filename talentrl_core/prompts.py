"""Policy prompts and action parsing (DESIGN.md §4).

Two sample kinds come out of a trajectory:
  * routing (step 0): task + talent menu → ``<talent>ID</talent>``
  * execution (steps 1..n): rules, task, retrieved skills, last ``h`` (obs, action) pairs, current
    observation, admissible actions, then the talent's strategy (last: next to the decision it should change)
    → ``<think>…</think><action>…</action>``
    (QA: ``<search>…</search>`` or ``<answer>…</answer>``, the Search-R1 protocol).

Skill and talent text is *data*: ``escape_data`` neutralises tags inside it so a skill that says
"<action>go north</action>" can never be parsed as the policy's action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}
"""Passed to every ``apply_chat_template`` of the policy (prompts, SFT labels, RL samples). The agent reasons in its
own ``<think>`` inside the reply format, so a template's native thinking mode is off: Qwen3's template then puts its
empty ``<think></think>`` block into the generation prompt, and the label is exactly the reply the action trie
allows. Templates without the variable ignore it."""


def _last_tag(text: str, tag: str) -> Optional[str]:
    """The body of the last complete ``<tag>…</tag>`` in linear time (a regex over a flood of unclosed tags is
    quadratic: seconds for a 64 kB completion). None when there is none.

    >>> _last_tag("<a>1</a> <a>2</a><a>3", "a")
    '2'
    """
    open_, close = f"<{tag}>", f"</{tag}>"
    end = text.rfind(close)
    start = text.rfind(open_, 0, end) if end >= 0 else -1
    if start < 0:
        return None
    end = text.find(close, start + len(open_))  # the first close after that open (non-greedy, as a regex would)
    return text[start + len(open_): end]


def _first_tag(text: str, tags: Sequence[str]) -> Optional[tuple[str, str]]:
    """(tag, body) of the earliest complete ``<tag>…</tag>`` among ``tags``, in linear time."""
    best: Optional[tuple[int, str, str]] = None
    for tag in tags:
        start = text.find(f"<{tag}>")
        end = text.find(f"</{tag}>", start + len(tag) + 2) if start >= 0 else -1
        if end >= 0 and (best is None or start < best[0]):
            best = (start, tag, text[start + len(tag) + 2: end])
    return (best[1], best[2]) if best else None



def escape_data(text: str) -> str:
    """Make inserted text inert for the parsers: angle brackets become look-alike guillemets.

    >>> escape_data("use <action>go north</action>")
    'use ‹action›go north‹/action›'
    """
    return text.replace("<", "‹").replace(">", "›")


def parse_action(completion: str) -> Optional[str]:
    """The command in the last ``<action>`` tag, stripped; None when there is none or it is empty.

    >>> parse_action("<think>go</think><action> go to desk 1 </action>")
    'go to desk 1'
    >>> parse_action("go to desk 1") is None
    True
    """
    found = _last_tag(completion, "action")
    if found is None:
        return None
    act = " ".join(found.split())
    return act or None


def parse_talent(completion: str) -> Optional[str]:
    """The id in the last ``<talent>`` tag; None when there is none.

    >>> parse_talent("<talent>T2</talent>")
    'T2'
    """
    found = _last_tag(completion, "talent")
    return (found.strip() or None) if found is not None else None


def parse_qa(completion: str) -> Optional[str]:
    """The first complete Search-R1 tag of a QA completion, normalised to ``<search>q</search>`` or
    ``<answer>a</answer>``; None when neither is present.

    >>> parse_qa("<think>who?</think><search> capital of France </search>")
    '<search>capital of France</search>'
    """
    m = _first_tag(completion, ("search", "answer"))
    if not m:
        return None
    kind, body = m[0], " ".join(m[1].split())
    return f"<{kind}>{body}</{kind}>" if body else None


def parse_for_env(env: str, completion: str) -> Optional[str]:
    return parse_qa(completion) if env == "qa" else parse_action(completion)


RULES = {
    "alfworld": "You are a household agent. Reply with <think>brief plan</think><action>one admissible command</action>.",
    "textworld": "You play a text game. Reply with <think>brief plan</think><action>one admissible command</action>.",
    "webshop": "You shop on a website for what the task asks. Reply with <think>brief plan</think><action>search[query] or "
               "click[one admissible button]</action>.",
    "qa": (
        "Answer the question. Reason in <think></think>. To look something up write "
        "<search>query</search>; results come back in <information></information>. "
        "Finish with <answer>short answer</answer>."
    ),
}


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
    return [{"role": "system", "content": RULES[env]}, {"role": "user", "content": user}]


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


def exec_context(env: str, goal: str, observation: str, talent: Optional[TalentView], skills: Sequence[SkillView],
                 past: Sequence[tuple[str, str]], n_history: int, admissible: Optional[Sequence[str]],
                 obs_chars: int) -> ExecContext:
    """The execution prompt's context at one step, as SFT (``sft_data.execution_samples``) and the rollout loop both
    build it: the last ``n_history`` (observation, action) pairs of ``past`` and every action so far."""
    return ExecContext(env=env, goal=goal, observation=observation, talent=talent, skills=skills,
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
    parts.append(f"Obs: {obs_text(ctx.observation, ctx.obs_chars)}")
    if ctx.admissible is not None:
        acts = [a for a in ctx.admissible if a not in ("look", "inventory")]
        parts.append("Admissible: " + ", ".join(acts))
    if ctx.talent is not None:  # last, next to the decision: what the talent says to do now
        parts.append(f"Strategy ({escape_data(ctx.talent.name)}): {escape_data(ctx.talent.strategy)}")
    system = RULES[ctx.env] + (" " + ctx.extra_rules if ctx.extra_rules else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)}]


def format_action(env: str, action: str, think: str = "") -> str:
    """The target completion for an expert action (SFT labels)."""
    prefix = f"<think>{think}</think>" if think else ""
    if env == "qa":
        return prefix + action
    return f"{prefix}<action>{action}</action>"


def format_talent(talent_id: str) -> str:
    return f"<talent>{talent_id}</talent>"
