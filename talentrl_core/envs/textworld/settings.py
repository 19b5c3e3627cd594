"""TextWorld game identity: challenges, canonical settings, env options, ``GameSpec`` (``challenge/settings/seed``)."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..base import Task
from .maps import MAPS
from .strategies import HEADINGS

FAMILY = "textworld"
CHALLENGES = ("tw-coin_collector", "tw-treasure_hunter", "tw-simple", "tw-cooking") + tuple(MAPS)
"TextWorld's generated challenges, then the hand-built maps of ``maps``."
SPLITS = ("train", "eval")
_SAFE = re.compile(r"^[A-Za-z0-9_.=,-]+$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# --------------------------------------------------------------------------------------------------
# Game identity: challenge, canonical settings, seed
# --------------------------------------------------------------------------------------------------


def canonical_settings(settings: str) -> str:
    """Canonical form of a settings string: keys sorted, ``-`` in keys as ``_``, flags as ``k=1``.

    >>> canonical_settings(" recipe=1, take=1,go=6 ")
    'go=6,recipe=1,take=1'
    >>> canonical_settings("open,cook=true,cut=0,recipe-seed=3")
    'cook=1,open=1,recipe_seed=3'
    >>> canonical_settings("")
    'default'
    """
    pairs: dict[str, str] = {}
    for part in (settings or "").split(","):
        part = part.strip()
        if not part or part == "default":
            continue
        k, sep, v = part.partition("=")
        k = k.strip().replace("-", "_")
        v = v.strip() if sep else "1"
        if v.lower() in _TRUE and not v.isdigit():
            v = "1"
        if v.lower() in _FALSE and not v.isdigit():
            v = "0"
        if not k:
            raise ValueError(f"settings {settings!r}: empty key in {part!r}")
        if k in pairs and pairs[k] != v:
            raise ValueError(f"settings {settings!r}: {k} given twice")
        pairs[k] = v
    # A false flag is the same game as an absent one.
    out = ",".join(f"{k}={v}" for k, v in sorted(pairs.items()) if v != "0" or not _is_flag_name(k))
    if out and not _SAFE.match(out):
        raise ValueError(f"settings {settings!r}: only letters, digits, '_', '.', '-' are allowed in keys and values")
    return out or "default"


ENV_OPTIONS = {"route": ("stated", "hidden", "hint"), "quadrant": ("any",) + tuple(HEADINGS)}
"""Settings the environment applies itself (not TextWorld's generator); the game file is the one without them.

* ``route=hidden`` shows the goal without its directions (``strategies.hide_route``); ``route=hint``
  replaces them with the set of directions the route uses ("every step of it goes north or east",
  ``hint_route``).
* ``quadrant=ne|sw|nw|se`` keeps only the seeds whose walkthrough moves stay in that quadrant
  (``quadrant_of``): a family where a heading strategy is right at every step."""


def split_settings(settings: str) -> tuple[str, dict[str, str]]:
    """Canonical settings → (the generator's settings, the env options with defaults filled in).

    >>> split_settings("level=5,route=hidden")
    ('level=5', {'route': 'hidden', 'quadrant': 'any'})
    >>> split_settings("level=5")
    ('level=5', {'route': 'stated', 'quadrant': 'any'})
    """
    game, opts = [], {k: v[0] for k, v in ENV_OPTIONS.items()}
    canon = canonical_settings(settings)
    for pair in ([] if canon == "default" else canon.split(",")):
        k, _, v = pair.partition("=")
        if k in ENV_OPTIONS:
            if v not in ENV_OPTIONS[k]:
                raise ValueError(f"settings {settings!r}: {k}={v!r}; choose from {list(ENV_OPTIONS[k])}")
            opts[k] = v
        else:
            game.append(pair)
    return ",".join(game) or "default", opts


def _is_flag_name(key: str) -> bool:
    # Boolean options of the challenges (tw-cooking: open/cook/cut/drop, tw-simple: test).
    return key in {"open", "cook", "cut", "drop", "test"}


def challenge_entry(challenge: str) -> tuple[str, Callable, Callable]:
    """(description, make, add_arguments) of a challenge: one of ``maps.MAPS`` or TextWorld's own."""
    import textworld.challenges

    if challenge in MAPS:
        return MAPS[challenge]
    if challenge not in textworld.challenges.CHALLENGES:
        raise ValueError(f"unknown TextWorld challenge {challenge!r}; choose from {sorted(set(textworld.challenges.CHALLENGES) | set(MAPS))}")
    return textworld.challenges.CHALLENGES[challenge]


def parse_settings(challenge: str, settings: str) -> dict[str, Any]:
    """Turn ``"level=5"`` into the settings mapping the challenge's ``make`` expects.

    Parsed with the challenge's own argument parser, so types, choices and defaults are TextWorld's.
    Raises ValueError naming the challenge and what is wrong.
    """
    _, _, add_arguments = challenge_entry(challenge)
    settings, _ = split_settings(settings)

    class _Parser(argparse.ArgumentParser):
        def error(self, message):  # never sys.exit from library code
            raise ValueError(f"{challenge} settings {settings!r}: {message}")

    parser = _Parser(prog=challenge, add_help=False)
    add_arguments(parser)
    flags = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    argv: list[str] = []
    canon = canonical_settings(settings)
    if canon != "default":
        for pair in canon.split(","):
            k, _, v = pair.partition("=")
            opt = "--" + k.replace("_", "-")
            if k in flags:
                if v != "0":
                    argv.append(opt)
            else:
                argv += [opt, v]
    return vars(parser.parse_args(argv))


@dataclass(frozen=True)
class GameSpec:
    challenge: str
    settings: str
    "Canonical settings string (``canonical_settings``)."
    seed: int

    @property
    def key(self) -> str:
        return f"{self.challenge}/{self.settings}/{self.seed}"

    @staticmethod
    def from_key(key: str) -> "GameSpec":
        parts = key.split("/")
        if len(parts) != 3:
            raise ValueError(f"TextWorld task key {key!r}: expected '<challenge>/<settings>/<seed>'")
        challenge, settings, seed = parts
        return GameSpec(challenge, canonical_settings(settings), int(seed))

    @property
    def game_settings(self) -> str:
        "The generator's settings (env options such as ``route`` removed): what the game file depends on."
        return split_settings(self.settings)[0]

    @property
    def options(self) -> dict[str, str]:
        return split_settings(self.settings)[1]

    def game_file(self, cache_dir: str | os.PathLike) -> Path:
        return Path(cache_dir) / FAMILY / self.challenge / self.game_settings / f"{self.seed}.z8"


def spec_of(task: Task) -> GameSpec:
    return GameSpec.from_key(task.key)


# --------------------------------------------------------------------------------------------------
# Generation (cached, atomic, reproducible)
# --------------------------------------------------------------------------------------------------
