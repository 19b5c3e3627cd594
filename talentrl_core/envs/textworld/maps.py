"""Hand-built TextWorld maps (TextWorld's ``GameMaker``) for task mixes its generated challenges cannot make.

``tw-fork_east`` / ``tw-fork_west``: from the start room a corridor leads ``corridor`` rooms north to a fork, whose
east and west exits each lead to one more room; the coin lies in the east (west) one. The start room's description
carries a sign that says which way the coin lies at the fork, and nothing else does once the objective's step-by-step
route is hidden (``route=hidden``): the room names are drawn per seed from one pool, the fork shows both exits alike.
So an agent that sees only its last observation (``env.history: 1``) reaches the fork without the sign in view, and a
wrong turn there costs the two steps back that a tight ``env.max_steps`` does not leave. A strategy chosen at the
start, when the sign is in view, is what carries it to the fork: the ``northeast`` / ``northwest`` headings
(``textworld.strategies``) walk the corridor north and take the fork's east (west) exit.

``tw-ring_east`` / ``tw-ring_north``: four rooms in a square ring (the start, a room east of it, one north of it, and the
corner between them); the coin lies in the room east (north) of the start, and a sign in the start room says which.
Every memoryless heading walks the ring and finds the coin, at a cost: ``eastnorth`` (east first) takes it in two
actions where it lies east and in four where it lies north, ``northeast`` the reverse. So with a step budget where
both succeed (collection) every task has two winning demonstrations, and with a budget of two actions (evaluation,
RL) only the talent that reads the sign right wins: which talent is better shows only in the reward (issue 38).

Each map is a challenge of this module's ``MAPS`` (``make(settings, options)``, ``add_arguments(parser)``, as
TextWorld's own challenges), so ``textworld.games`` generates, caches and plays them like any other.
"""

from __future__ import annotations

import argparse
import random
from typing import Any, Callable, Mapping

from .strategies import REVERSE

ROOM_NAMES = (
    "atrium", "pantry", "attic", "cellar", "gallery", "study", "workshop", "scullery", "parlour", "vestibule",
    "library", "chapel", "armoury", "larder", "solarium", "nursery", "conservatory", "boudoir", "lounge", "vault",
)
"The pool every map draws its room names from (per seed), so that no name tells the branch."


def sign(side: str) -> str:
    """The start room's sign: the only place the fork's side is told.

    >>> sign("east")
    'A sign on the wall reads: at the fork, the coin lies east.'
    """
    return f"A sign on the wall reads: at the fork, the coin lies {side}."


def fork_commands(corridor: int, side: str) -> list[str]:
    """The winning walkthrough: the corridor north, the fork's ``side`` exit, the coin.

    >>> fork_commands(2, "west")
    ['go north', 'go north', 'go west', 'take coin']
    """
    return ["go north"] * corridor + [f"go {side}", "take coin"]


def _fork_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corridor", type=int, default=2, help="rooms from the start to the fork (>= 1)")


def _make_fork(side: str) -> Callable[[Mapping[str, Any], Any], Any]:
    other = REVERSE[side]

    def make(settings: Mapping[str, Any], options) -> Any:
        from textworld import GameMaker

        corridor = int(settings.get("corridor", 2))
        if corridor < 1:
            raise ValueError(f"tw-fork_{side}: corridor={corridor}; give 1 or more rooms")
        seeds = options.seeds  # TextWorld turns one seed into {"map": ..., "objects": ..., ...}
        rng = random.Random(seeds["map"] if isinstance(seeds, dict) else int(seeds or 0))
        names = rng.sample(ROOM_NAMES, corridor + 3)
        maker = GameMaker(options)
        rooms = [maker.new_room(n) for n in names[: corridor + 1]]  # start, corridor ..., fork
        for a, b in zip(rooms, rooms[1:]):
            maker.connect(a.north, b.south)
        fork = rooms[-1]
        ends = {side: maker.new_room(names[corridor + 1]), other: maker.new_room(names[corridor + 2])}
        maker.connect(fork.east, ends["east"].west)
        maker.connect(fork.west, ends["west"].east)
        ends[side].add(maker.new(type="o", name="coin"))
        maker.set_player(rooms[0])
        commands = fork_commands(corridor, side)
        maker.set_quest_from_commands(commands)
        game = maker.build()
        start = game.infos[rooms[0].id]
        start.desc = sign(side) + (" " + start.desc if start.desc else "")
        game.metadata["walkthrough"] = commands
        return game

    return make


def ring_sign(side: str) -> str:
    """The start room's sign on a ring: the only place that tells where the coin lies.

    >>> ring_sign("north")
    'A sign on the wall reads: the coin lies north.'
    """
    return f"A sign on the wall reads: the coin lies {side}."


RING_COMMANDS = {"east": ["go east", "take coin"], "north": ["go north", "take coin"]}
"The winning walkthrough of each ring: the shortest, two actions."


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _make_ring(side: str) -> Callable[[Mapping[str, Any], Any], Any]:
    def make(settings: Mapping[str, Any], options) -> Any:
        from textworld import GameMaker

        seeds = options.seeds
        rng = random.Random(seeds["map"] if isinstance(seeds, dict) else int(seeds or 0))
        names = rng.sample(ROOM_NAMES, 4)
        maker = GameMaker(options)
        start, east, north, corner = (maker.new_room(n) for n in names)
        maker.connect(start.east, east.west)
        maker.connect(start.north, north.south)
        maker.connect(east.north, corner.south)
        maker.connect(north.east, corner.west)
        {"east": east, "north": north}[side].add(maker.new(type="o", name="coin"))
        maker.set_player(start)
        commands = RING_COMMANDS[side]
        maker.set_quest_from_commands(commands)
        game = maker.build()
        first = game.infos[start.id]
        first.desc = ring_sign(side) + (" " + first.desc if first.desc else "")
        game.metadata["walkthrough"] = commands
        return game

    return make


MAPS: dict[str, tuple[str, Callable, Callable]] = {
    **{f"tw-fork_{side}": (f"A corridor north to a fork; the coin lies {side}; a sign in the start room says so.",
                           _make_fork(side), _fork_arguments) for side in ("east", "west")},
    **{f"tw-ring_{side}": (f"Four rooms in a ring; the coin lies {side} of the start; a sign in the start room says so.",
                           _make_ring(side), _no_arguments) for side in ("east", "north")},
}
"Challenge name → (description, make, add_arguments), as ``textworld.challenges.CHALLENGES`` holds them."
