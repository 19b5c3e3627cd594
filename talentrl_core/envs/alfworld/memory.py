"""ALFWorld's memory line (``env.memory``, issue 39): where the agent stands in its search, from its own past only.

A kitchen has 20-40 receptacles and the search for an object is the longest part of most tasks; a policy that sees
its last observation or two cannot tell which cabinets it already opened. The memory line restates what the agent's
own actions and the observations they produced say (``strategies.recall``, the replay the strategy experts use):
what it holds and what was done to it, where it saw objects of the goal's classes, the receptacles it has searched
and the ones it has not. It reveals nothing hidden (no object it has not seen, no location it was not told), so it is
what a agent with a notebook would know; it is nonetheless a deviation from ALFWorld's raw-observation protocol, and
the docs say so (``docs/alfworld.md``).
"""

from __future__ import annotations

from typing import Sequence

from ..strategies import EpisodeView
from .strategies import parse_goal, receptacle_class, recall

MAX_LISTED = 30
"Receptacles named per list at most (the rest counted), to bound the prompt."


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return (shown + f" (+{len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else shown) or "none"


def memory_line(goal: str, past: Sequence[tuple[str, str]], observation: str) -> str:
    """The memory line of a step: ``past`` are the (observation, action) pairs so far, the first observation first;
    ``observation`` what the last action produced.

    >>> first = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
    ...          "and a fridge 1.\\n\\nYour task is to: put a cool apple in countertop.")
    >>> past = [(first, "go to cabinet 1"), ("You arrive at cabinet 1. The cabinet 1 is closed.", "open cabinet 1"),
    ...         ("You open the cabinet 1. The cabinet 1 is open. In it, you see a cup 1.", "go to countertop 1")]
    >>> memory_line("put a cool apple in countertop.", past, "You arrive at countertop 1. On the countertop 1, you see a apple 2.")
    'Memory: at countertop 1; holding nothing; seen apple: apple 2 at countertop 1; searched: cabinet 1, countertop 1; not yet searched: fridge 1'
    >>> memory_line("put a cool apple in countertop.", [], first)
    'Memory: at start; holding nothing; searched: none; not yet searched: cabinet 1, countertop 1, fridge 1'
    """
    initial = past[0][0] if past else observation
    after = [o for o, _ in past[1:]] + [observation]
    transcript = tuple((a, o) for (_, a), o in zip(past, after))
    mem = recall(EpisodeView(goal, initial, observation, (), transcript))
    g = parse_goal(goal)
    held = mem.holding or "nothing"
    if mem.holding and mem.done:
        held += f" ({', '.join(sorted(mem.done))} done)"
    parts = [f"at {mem.at or 'start'}", f"holding {held}"]
    if mem.placed:
        parts.append(f"placed: {', '.join(mem.placed)}")
    wanted = {g.obj, g.target} if g else set()
    for cls in sorted(wanted):
        where = [f"{item} at {r}" for r in mem.receptacles for item in mem.seen.get(r, ()) if receptacle_class(item) == cls]
        if where:
            parts.append(f"seen {cls}: {_names(where)}")
    searched = [r for r in mem.receptacles if r in mem.tried and r not in mem.closed]
    parts.append(f"searched: {_names(searched)}")
    parts.append(f"not yet searched: {_names([r for r in mem.receptacles if r not in searched])}")
    return "Memory: " + "; ".join(parts)
