"""ALFWorld's strategy experts (``strategies.py``): searches that differ in the order they visit receptacle classes.

Every ALFWorld task starts with finding an object the goal names in a room of 6-30 receptacles. Some are *open*
(countertops, tables, desks, shelves, sinkbasins, beds, sofas, garbagecans...: one ``go to`` shows what is on
them), some are *closed* (``CLOSED_CLASSES``: drawers, cabinets, fridge, microwave, safes, boxes: the ``go to``
finds them shut, an ``open`` shows what is in them). The strategies share one procedure and differ only in the
order of that search:

* ``surfaces-first`` — the open receptacles in the order the first observation lists them, then the closed ones;
* ``containers-first`` — the closed receptacles first (opening each), then the open ones.

The procedure (``searcher``): take an object of the goal's class as soon as a ``take`` of one is admissible;
else open the closed receptacle it stands at, go back to where it saw one, or go to the next receptacle of the
order it has not been to. Holding the object, it finishes the task type: ``heat``/``cool``/``clean`` it with
the first microwave / fridge / sinkbasin of the room, ``use`` the lamp (``look_at_obj_in_light``: where it saw
one, else the next open receptacle of the order), then ``move`` it to the goal's receptacle (the first of its
class in the room, opened if needed; the second object of ``put two X in Y`` goes to the same one). Every task
type of ALFWorld has a goal it parses (``parse_goal``); a goal it cannot parse gets None.

Which order wins depends on where the object class lives: books, apples and laptops mostly lie on open surfaces,
cds, credit cards, keys and cutlery often in drawers, so under a step budget the matrix of strategy × object class
differs (``bench/bench_strategies_alfworld.py``). All strategies read only the agent's view: the goal, the first
observation (the room's receptacles), the admissible commands and their own past actions with what they produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..strategies import EpisodeView, Strategy, register

FAMILY = "alfworld"

CLOSED_CLASSES = frozenset({"drawer", "cabinet", "fridge", "microwave", "safe", "box"})
"Receptacle classes that are shut until opened (alfworld's ``OPENABLE_CLASS_LIST``, lower case)."

APPLIANCES = {"heat": ("microwave",), "cool": ("fridge",), "clean": ("sinkbasin", "bathtubbasin")}
"The receptacle classes each transformation is done with, first choice first."

_GOALS: tuple[tuple[str, re.Pattern], ...] = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("two", r"put two (\w+) (?:in|on) (\w+)"),
    ("two", r"find two (\w+) and put them (?:in|on) (\w+)"),
    ("clean", r"put a clean (\w+) (?:in|on) (\w+)"),
    ("clean", r"clean some (\w+) and put it (?:in|on) (\w+)"),
    ("heat", r"put a hot (\w+) (?:in|on) (\w+)"),
    ("heat", r"heat some (\w+) and put it (?:in|on) (\w+)"),
    ("cool", r"put a cool (\w+) (?:in|on) (\w+)"),
    ("cool", r"cool some (\w+) and put it (?:in|on) (\w+)"),
    ("light", r"look at (\w+) under the (\w+)"),
    ("light", r"examine the (\w+) with the (\w+)"),
    ("place", r"put (?:a|an|some) (\w+) (?:in|on) (\w+)"),
))
_SEEN_RE = re.compile(r"you see (.*?)\.?$")
_ITEM_RE = re.compile(r"\b(?:a|an) ([a-z]+ \d+)")
_ROOM_RE = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\n|$)")
_TAKE_RE = re.compile(r"take (\w+ \d+) from (.+)")
_MOVE_RE = re.compile(r"(?:move|put) (\w+ \d+) (?:to|in|on|in/on) (.+)")
_NOTHING = "Nothing happens."


@dataclass(frozen=True)
class Goal:
    """What a goal asks: ``kind`` (place, two, clean, heat, cool, light), the object's class and the receptacle
    class to put it in (``light``: the lamp's class)."""

    kind: str
    obj: str
    target: str


def parse_goal(goal: str) -> Optional[Goal]:
    """The goal's kind, object class and target class (None: a goal none of ALFWorld's templates says).

    >>> parse_goal("put some book on sidetable.")
    Goal(kind='place', obj='book', target='sidetable')
    >>> parse_goal("find two cd and put them in drawer."), parse_goal("examine the bowl with the desklamp.")
    (Goal(kind='two', obj='cd', target='drawer'), Goal(kind='light', obj='bowl', target='desklamp'))
    >>> parse_goal("put a hot mug in cabinet.").kind, parse_goal("dance a jig.") is None
    ('heat', True)
    """
    text = " ".join(goal.lower().split()).rstrip(".")
    for kind, pattern in _GOALS:
        m = pattern.fullmatch(text)
        if m:
            return Goal(kind, m.group(1), m.group(2))
    return None


def room_receptacles(initial_observation: str) -> list[str]:
    """The receptacles the first observation lists, in its order.

    >>> room_receptacles("You are in the middle of a room. Looking quickly around you, you see a bed 1, a drawer 2, "
    ...                  "and a sidetable 1.\\n\\nYour task is to: put some book on sidetable.")
    ['bed 1', 'drawer 2', 'sidetable 1']
    """
    m = _ROOM_RE.search(initial_observation or "")
    return _ITEM_RE.findall(m.group(1)) if m else []


def receptacle_class(name: str) -> str:
    """``"cabinet 10"`` → ``"cabinet"``."""
    return name.rsplit(" ", 1)[0]


def items_seen(observation: str) -> list[str]:
    """The objects an observation lists after "you see" (``[]`` for "you see nothing").

    >>> items_seen("You arrive at desk 1. On the desk 1, you see a cd 2, a mug 1, and a pen 3.")
    ['cd 2', 'mug 1', 'pen 3']
    """
    m = _SEEN_RE.search(" ".join((observation or "").split()))
    return _ITEM_RE.findall(m.group(1)) if m else []


@dataclass
class Memory:
    """What the transcript says so far (rebuilt from it at every step: the strategies keep no state)."""

    receptacles: list[str]
    at: Optional[str] = None
    "The receptacle last arrived at (``go to``) or examined from where the agent stands."
    tried: set[str] = field(default_factory=set)
    "Receptacles the agent has gone to or examined (whether or not that worked)."
    closed: set[str] = field(default_factory=set)
    "Receptacles found shut and not opened since."
    seen: dict[str, list[str]] = field(default_factory=dict)
    "Receptacle → the objects last seen in or on it."
    holding: Optional[str] = None
    placed: list[str] = field(default_factory=list)
    "Objects moved into a receptacle, in order."
    target: Optional[str] = None
    "The receptacle the first object went to."
    done: set[str] = field(default_factory=set)
    "Verbs that worked on the held object: heat, cool, clean, use."


def _look(mem: Memory, recep: str, obs: str) -> None:
    """Note what an arrival, examine or open showed of ``recep``."""
    if f"The {recep} is closed" in obs:
        mem.closed.add(recep)
    else:
        mem.closed.discard(recep)
        mem.seen[recep] = items_seen(obs)


def _carry(mem: Memory, verb: str, action: str) -> None:
    """Note a ``take`` / ``move`` / transformation that worked."""
    if verb == "take":
        m = _TAKE_RE.fullmatch(action)
        if m:
            mem.holding = m.group(1)
            for items in mem.seen.values():
                if m.group(1) in items:
                    items.remove(m.group(1))
    elif verb in ("move", "put"):
        m = _MOVE_RE.fullmatch(action)
        if m:
            mem.placed.append(m.group(1))
            mem.target = mem.target or m.group(2)
            mem.seen.setdefault(m.group(2), []).append(m.group(1))
            mem.holding = None
            mem.done.clear()
    elif verb in ("heat", "cool", "clean", "use"):
        mem.done.add(verb)


def recall(view: EpisodeView) -> Memory:
    """Replay the view's transcript into a :class:`Memory`."""
    mem = Memory(room_receptacles(view.initial_observation))
    for action, obs in view.transcript:
        verb, _, rest = action.partition(" ")
        ok = " ".join((obs or "").split()) != _NOTHING
        if verb == "go" and rest.startswith("to "):
            recep = rest[3:]
        elif verb == "examine" and rest in mem.receptacles:
            recep = rest
        else:
            if ok and verb == "open":
                _look(mem, rest, obs)
            elif ok:
                _carry(mem, verb, action)
            continue
        mem.tried.add(recep)
        if ok:
            mem.at = recep
            _look(mem, recep, obs)
    return mem


def _reach(view: EpisodeView, recep: str) -> Optional[str]:
    """``go to R``, or ``examine R`` where R shares the agent's location (no ``go to`` is admissible then)."""
    for command in (f"go to {recep}", f"examine {recep}"):
        if command in view.admissible:
            return command
    return None


def _first(view: EpisodeView, pattern: str) -> Optional[str]:
    """The first admissible command that matches ``pattern`` in full."""
    rx = re.compile(pattern)
    return next((a for a in view.admissible if rx.fullmatch(a)), None)


def _open_here(view: EpisodeView, mem: Memory) -> Optional[str]:
    """``open R`` when R, where the agent stands, was found shut."""
    if mem.at in mem.closed and f"open {mem.at}" in view.admissible:
        return f"open {mem.at}"
    return None


def _search(view: EpisodeView, mem: Memory, order: list[str], wanted: str, open_ok: bool = True) -> Optional[str]:
    """One step of the search for an object of class ``wanted``: open the shut receptacle here, go back to a
    receptacle where one was seen, else go to the next receptacle of ``order`` not yet tried."""
    if open_ok:
        step = _open_here(view, mem)
        if step:
            return step
    rx = re.compile(re.escape(wanted) + r" \d+")
    for recep in order:
        if recep != mem.at and any(rx.fullmatch(o) and o not in mem.placed for o in mem.seen.get(recep, ())):
            step = _reach(view, recep)
            if step:
                return step
    for recep in order:
        if recep not in mem.tried and (open_ok or receptacle_class(recep) not in CLOSED_CLASSES):
            step = _reach(view, recep)
            if step:
                return step
    return None


def _fetch(view: EpisodeView, mem: Memory, goal: Goal, order: list[str]) -> Optional[str]:
    """Hands empty: take an object of the goal's class on sight (from where the agent stands first), else search."""
    if goal.kind == "two" and len(mem.placed) >= 2:
        return None
    takes = [a for a in view.admissible if (m := _TAKE_RE.fullmatch(a)) and receptacle_class(m.group(1)) == goal.obj
             and m.group(1) not in mem.placed]
    if takes:
        here = [a for a in takes if a.endswith(f" from {mem.at}")]
        return (here or takes)[0]
    return _search(view, mem, order, goal.obj)


def _transform(view: EpisodeView, mem: Memory, goal: Goal) -> Optional[str]:
    """Holding the object of a heat / cool / clean goal: do it with the first appliance of the room."""
    step = _first(view, re.escape(f"{goal.kind} {mem.holding} with ") + r".+")
    if step:
        return step
    apps = [r for cls in APPLIANCES[goal.kind] for r in mem.receptacles if receptacle_class(r) == cls]
    if not apps:
        return None
    if mem.at == apps[0]:
        return _open_here(view, mem)
    return _reach(view, apps[0])


def _light(view: EpisodeView, mem: Memory, goal: Goal, order: list[str]) -> Optional[str]:
    """Holding the object of a look-at-in-light goal: use the lamp, going where one was seen or searching the open
    receptacles for one (lamps stand on surfaces)."""
    step = _first(view, re.escape(f"use {goal.target} ") + r"\d+")
    return step or _search(view, mem, order, goal.target, open_ok=False)


def _place(view: EpisodeView, mem: Memory, goal: Goal) -> Optional[str]:
    """Holding a finished object: move it to the goal's receptacle (the one the first object went to, else the
    first of the class in the room), going there and opening it when needed."""
    held = re.escape(mem.holding or "")
    if mem.target:
        step = _first(view, f"(?:move|put) {held} (?:to|in|on|in/on) {re.escape(mem.target)}")
    else:
        step = _first(view, f"(?:move|put) {held} (?:to|in|on|in/on) {re.escape(goal.target)} \\d+")
    if step:
        return step
    dest = mem.target or next((r for r in mem.receptacles if receptacle_class(r) == goal.target), None)
    if dest is None:
        return None
    if mem.at == dest:
        return _open_here(view, mem)
    return _reach(view, dest)


def searcher(order_of: Callable[[list[str]], list[str]]) -> Callable[[EpisodeView], Optional[str]]:
    """A strategy that searches the room's receptacles in ``order_of(receptacles)`` (see the module's docstring)."""

    def act(view: EpisodeView) -> Optional[str]:
        goal = parse_goal(view.goal)
        if goal is None:
            return None
        mem = recall(view)
        order = order_of(mem.receptacles)
        if mem.holding is None:
            return _fetch(view, mem, goal, order)
        if goal.kind in APPLIANCES and goal.kind not in mem.done:
            return _transform(view, mem, goal)
        if goal.kind == "light":
            return _light(view, mem, goal, order)
        return _place(view, mem, goal)

    return act


def surfaces_first(receptacles: list[str]) -> list[str]:
    """The open receptacles in the room's order, then the closed ones in the room's order."""
    return sorted(receptacles, key=lambda r: receptacle_class(r) in CLOSED_CLASSES)


def containers_first(receptacles: list[str]) -> list[str]:
    """The closed receptacles in the room's order, then the open ones in the room's order."""
    return sorted(receptacles, key=lambda r: receptacle_class(r) not in CLOSED_CLASSES)


SURFACES_FIRST = register(Strategy(
    FAMILY, "surfaces-first",
    "Search the open receptacles (countertops, tables, shelves, sinks) in the order the room lists them before "
    "opening drawers, cabinets and the fridge; take the object on sight and carry it to the goal's receptacle.",
    searcher(surfaces_first),
))
CONTAINERS_FIRST = register(Strategy(
    FAMILY, "containers-first",
    "Open the closed receptacles (drawers, cabinets, fridge, microwave, safes) in the order the room lists them "
    "before looking on the open surfaces; take the object on sight and carry it to the goal's receptacle.",
    searcher(containers_first),
))
