"""TextWorld's strategy experts (``strategies.py``) and the goal-text helpers they share with the env.

* ``follow`` — *follow the stated route*: take the directions the goal lists, in order, then take the
  goal's object. Where the goal states no route it has nothing to do (returns None).
* ``explore`` — *explore depth-first*: in every room try the exits in a fixed order (north, east, south,
  west) that have not been tried from it, never straight back the way it came; when a room has none left,
  walk back the way it was entered; take the goal's object as soon as it can. It ignores stated routes.

* ``northeast`` / ``southwest`` / ``northwest`` / ``southeast`` / ``eastnorth`` (and ``eastfirst`` / ``northfirst``, the
  ring's two headings under texts that name one direction each) — *head one way*: in every room take the first
  admissible exit in a fixed order (for ``northeast``: north, east, south, west; the others alike, the
  quadrant's two directions first), with no memory at all; take the goal's object as soon as it can. On a
  route whose every step goes north or east (a ``quadrant=ne`` task, see ``textworld.settings``) ``northeast`` walks it
  straight, since the way back is always south or west; on such a
  route ``southwest`` turns back at the first room and oscillates.

On a task whose goal states the route, ``follow`` walks the shortest path while ``explore`` pays for every
dead end it opens; on a task whose goal hides the route (``route=hidden``, see ``textworld.settings``) only
``explore`` can act. The headings need nothing but the room's exits: a rule a small executor can carry out
from the talent's own text, where following a stated route means copying the k-th direction out of the goal.
All read only the agent's view: the goal, the room headers (``-= Room =-``) of the observations, the
admissible commands and their own past actions.
"""

from __future__ import annotations

import re
from typing import Optional

from ..strategies import EpisodeView, Strategy, register

DIRECTIONS = ("north", "east", "south", "west")
REVERSE = {"north": "south", "south": "north", "east": "west", "west": "east"}
_DIR_RE = re.compile(r"\b(north|south|east|west)\b", re.I)
_SENTENCE_RE = re.compile(r"[^.!?]+[.!?]*")
_ROOM_RE = re.compile(r"-=\s*(.+?)\s*=-")
_LEAD_RE = re.compile(r"^[^,]{0,40},\s*")
_NOT_GIVEN = "The route is not given"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.findall(" ".join((text or "").split())) if s.strip()]


def goal_route(goal: str) -> list[str]:
    """The directions a goal states, in order (one per sentence that names one).

    >>> goal_route("First, venture west. Then, go north. And then, pick up the coin from the floor of the vault.")
    ['west', 'north']
    >>> goal_route("Find the coin. It lies on the floor of the vault.")
    []
    >>> goal_route("The route is not given, but every step of it goes south or west. Take the coin.")
    []
    """
    out = []
    for s in sentences(goal):
        if s.startswith(_NOT_GIVEN):  # route=hidden / route=hint: the hint names directions, not steps
            continue
        m = _DIR_RE.search(s)
        if m:
            out.append(m.group(1).lower())
    return out


def hide_route(goal: str, note: str = f"{_NOT_GIVEN}: find it yourself.") -> str:
    """The goal with ``note`` in place of the sentences that give directions (what ``route=hidden`` tasks show).

    >>> hide_route("Welcome! First of all, venture south. Then, move north. And then, lift the coin from the floor of the kitchenette. Once that's all handled, you can stop!")
    'Welcome! The route is not given: find it yourself. Lift the coin from the floor of the kitchenette. You can stop!'
    """
    kept: list[str] = []
    hid = False
    for s in sentences(goal):
        if _DIR_RE.search(s):
            if not hid:
                kept.append(note)
                hid = True
            continue
        if hid:
            s = _LEAD_RE.sub("", s)
            s = s[:1].upper() + s[1:]
        kept.append(s)
    return " ".join(kept)


HEADINGS = {"ne": ("north", "east"), "sw": ("south", "west"), "nw": ("north", "west"), "se": ("south", "east")}
"The quadrants a route can stay in, by the two directions its steps may take."


def quadrant_of(route: list[str]) -> Optional[str]:
    """The first quadrant of ``HEADINGS`` that holds every step of ``route`` (None: it turns both ways).

    >>> quadrant_of(["north", "east", "north"]), quadrant_of(["west"]), quadrant_of(["north", "south"])
    ('ne', 'sw', None)
    """
    steps = set(route)
    return next((q for q, dirs in HEADINGS.items() if steps and steps <= set(dirs)), None)


def hint_route(goal: str) -> str:
    """The goal with its directions replaced by the set of directions the route uses (``route=hint``).

    >>> hint_route("First, venture west. Then, go south. And then, take the coin from the floor of the den.")
    'The route is not given, but every step of it goes south or west. Take the coin from the floor of the den.'
    """
    used = set(goal_route(goal))
    dirs = [d for d in DIRECTIONS if d in used]
    said = " or ".join(dirs) if len(dirs) < 3 else ", ".join(dirs[:-1]) + " or " + dirs[-1]
    return hide_route(goal, f"{_NOT_GIVEN}, but every step of it goes {said}.")


def room_of(observation: str) -> Optional[str]:
    """The room name in an observation's ``-= Room =-`` header (None when it has none)."""
    m = _ROOM_RE.search(observation or "")
    return m.group(1).strip().lower() if m else None


def goal_take(view: EpisodeView) -> Optional[str]:
    """An admissible ``take X`` whose object the goal names (the task's last command)."""
    goal = " ".join(view.goal.lower().split())
    for a in view.admissible:
        if a.startswith("take ") and re.search(r"\b" + re.escape(a[5:].split(" from ")[0]) + r"\b", goal):
            return a
    return None


def _moves(view: EpisodeView) -> list[str]:
    return [a[3:] for a, _ in view.transcript if a.startswith("go ") and a[3:] in REVERSE]


def follow(view: EpisodeView) -> Optional[str]:
    route = goal_route(view.goal)
    if not route:
        return None
    done = len(_moves(view))
    if done < len(route):
        step = f"go {route[done]}"
        return step if step in view.admissible else None
    return goal_take(view)


def explore(view: EpisodeView) -> Optional[str]:
    take = goal_take(view)
    if take:
        return take
    room = room_of(view.initial_observation) or "?"
    tried: dict[str, set[str]] = {}
    parent: dict[str, Optional[str]] = {room: None}
    for action, obs in view.transcript:
        if not action.startswith("go ") or action[3:] not in REVERSE:
            continue
        d = action[3:]
        tried.setdefault(room, set()).add(d)
        new = room_of(obs)
        if new is None or new == room:
            continue
        if new not in parent:
            parent[new] = REVERSE[d]
        tried.setdefault(new, set()).add(REVERSE[d])  # the way back is not new ground
        room = new
    for d in DIRECTIONS:
        if f"go {d}" in view.admissible and d not in tried.get(room, set()) and d != parent.get(room):
            return f"go {d}"
    back = parent.get(room)
    return f"go {back}" if back and f"go {back}" in view.admissible else None


def heading(order: tuple[str, ...]):
    """A memoryless strategy: the goal's object on sight, else the first admissible exit in ``order``."""

    def act(view: EpisodeView) -> Optional[str]:
        take = goal_take(view)
        if take:
            return take
        return next((f"go {d}" for d in order if f"go {d}" in view.admissible), None)

    return act


FOLLOW = register(Strategy("textworld", "follow", "Follow the route the goal states, step by step, then take the object.", follow))
EXPLORE = register(Strategy(
    "textworld", "explore",
    "Explore depth-first: try each room's untried exits (north, east, south, west), back out of dead ends, take the object on sight.",
    explore,
))


def _order(a: str, b: str) -> tuple[str, str, str, str]:
    """A heading's exit order: ``a``, then ``b``, then their reverses in the same order."""
    return (a, b, REVERSE[a], REVERSE[b])


def _heading_strategy(a: str, b: str) -> Strategy:
    """``northeast`` … ``southeast``, ``eastnorth``: ``a`` first, then ``b``, then their reverses, in the same order."""
    order = _order(a, b)
    name = a + b
    text = (f"Head {a}-{b}: in every room take the {a} exit, else the {b} one ({order[2]}, then {order[3]}, only when "
            "there is no other); take the object on sight.")
    return register(Strategy("textworld", name, text, heading(order)))


NORTHEAST, SOUTHWEST, NORTHWEST, SOUTHEAST = (_heading_strategy(*HEADINGS[q]) for q in HEADINGS)
EASTNORTH = _heading_strategy("east", "north")
"East first: on a ring (``maps``, ``tw-ring_*``) the shortest way to a coin east of the start, the long way round to one north."


def _first_strategy(a: str, b: str) -> Strategy:
    """``eastfirst`` / ``northfirst``: ``eastnorth`` / ``northeast``'s walk under a text that names only the first
    heading. The two heading texts of a ring are the same words in another order ("Head east-north: … the east exit,
    else the north one …" against "Head north-east: …"); a small executor trained on them followed neither (the
    routing study's draw 0: first move ``go east`` under both, docs/results/routing). These name one direction each."""
    text = f"{a.capitalize()} first: in every room take the {a} exit if there is one; take the object on sight."
    return register(Strategy("textworld", f"{a}first", text, heading(_order(a, b))))


EASTFIRST, NORTHFIRST = _first_strategy("east", "north"), _first_strategy("north", "east")
