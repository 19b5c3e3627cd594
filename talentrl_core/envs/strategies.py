"""Strategy experts: several named ways of solving a family's tasks (DESIGN.md §3, "Talents must carry
information").

A talent is only worth routing over when it changes which action is right. One strategy-blind expert
cannot teach that, so a family registers *strategy experts*: deterministic policies that each solve tasks
in a recognisably different way (TextWorld: follow the stated route / explore depth-first). Collection
runs every registered strategy on every task and tags each trajectory with the strategy that produced it;
the measured strategy × task-family success matrix then says which talent is best for which tasks.

A strategy sees only what the agent sees (``EpisodeView``: goal, observations, admissible commands, its
own past actions), never the game's internals, so what it does is imitable from the prompt.

One registry for every family: the family's ``FamilySpec.strategies`` (``envs/registry.py``) names the module that
registers its strategies; it is imported on first use, so asking for ALFWorld's strategies never imports TextWorld.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Optional

@dataclass(frozen=True)
class EpisodeView:
    """What a strategy may read: the agent's own view of the episode so far."""

    goal: str
    initial_observation: str
    observation: str
    admissible: tuple[str, ...]
    transcript: tuple[tuple[str, str], ...] = field(default=())
    "(action, observation it produced) for every step taken so far."


@dataclass(frozen=True)
class Strategy:
    family: str
    name: str
    description: str
    "One sentence: how this strategy solves a task (docs, reports, the talent text of a teacher)."
    act: Callable[[EpisodeView], Optional[str]]
    "The next command, or None when the strategy has nothing to do (it does not apply to this task)."
    teacher: bool = True
    ("False for a rule baseline: a zero-parameter floor the evaluation runs (``eval.systems``: ``strategy:<name>``) "
     "but collection never imitates and distillation never turns into a talent.")


_REGISTRY: dict[str, dict[str, Strategy]] = {}


def register(strategy: Strategy) -> Strategy:
    """Add a strategy to its family (registration order is the order ``strategies`` lists)."""
    fam = _REGISTRY.setdefault(strategy.family, {})
    if strategy.name in fam and fam[strategy.name] is not strategy:
        raise ValueError(f"strategy {strategy.name!r} is registered twice for family {strategy.family!r}")
    fam[strategy.name] = strategy
    return strategy


def _registered(family: str) -> list[Strategy]:
    from .registry import FAMILIES

    spec = FAMILIES.get(str(family))
    module = spec.strategies if spec is not None else None
    if module is not None and family not in _REGISTRY:
        importlib.import_module(module)
    return list(_REGISTRY.get(family, {}).values())


def strategies(family: str) -> list[Strategy]:
    """Every strategy expert (teacher) registered for ``family`` (empty when the family has none)."""
    return [s for s in _registered(family) if s.teacher]


def chosen(family: str, wanted: list[str]) -> list[Optional[str]]:
    """The strategy experts a setting names (``collect.strategies``): ``["all"]`` every one of ``family`` (``[None]``:
    the env's strategy-blind expert where it has none), ``["none"]`` that expert alone, else the names given (a
    KeyError names the choices)."""
    if wanted == ["none"]:
        return [None]
    if wanted == ["all"]:
        return [s.name for s in strategies(family)] or [None]
    return [get_strategy(family, name).name for name in wanted]


def rules(family: str) -> list[Strategy]:
    """The rule baselines registered for ``family``: zero-parameter floors, never teachers."""
    return [s for s in _registered(family) if not s.teacher]


def get_strategy(family: str, name: str) -> Strategy:
    """The strategy or rule baseline ``name`` of ``family``; a KeyError names the choices."""
    found = {s.name: s for s in _registered(family)}
    if name not in found:
        raise KeyError(f"no strategy {name!r} for env {family!r}; choose from {sorted(found) or 'none (no strategies registered)'}")
    return found[name]


@dataclass
class Played:
    """One episode of a strategy expert (``play``)."""

    actions: list[str]
    won: bool
    gave_up: bool
    "The strategy returned None before the episode ended (it does not apply to this task, or is stuck)."


def play(env, task, name: str, require_admissible: bool = False, max_steps: int = 200) -> Played:
    """Reset ``env`` to ``task`` and let the strategy ``name`` act (``env.strategy_action``) until the episode ends.

    ``env`` is any environment with ``reset``, ``step`` and ``strategy_action`` (TextWorld, ALFWorld), kept open by
    the caller so that one loaded game serves several strategies. ``require_admissible``: a ValueError names a
    command the strategy chose that the game did not list as admissible at that step. ``max_steps``: a strategy
    still walking after that many steps (a memoryless one oscillating between two rooms) has lost the episode.
    """
    env.reset(task)
    actions: list[str] = []
    while len(actions) < max_steps and (action := env.strategy_action(name)) is not None:
        if require_admissible and action not in env.admissible_actions():
            raise ValueError(f"strategy {name!r} chose {action!r}, not admissible at step {len(actions) + 1}")
        actions.append(action)
        res = env.step(action)
        if res.done:
            return Played(actions, bool(res.won), False)
    return Played(actions, False, len(actions) < max_steps)
