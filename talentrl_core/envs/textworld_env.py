"""Old import path of the TextWorld family, kept for bench/ and tests/ that import it: the code lives in
``envs/textworld/`` (``settings``, ``games``, ``env``, ``family``). Monkeypatch ``envs.textworld.games``, not this
module. ``python -m talentrl_core.envs.textworld_env --check ...`` still runs the expert check."""

from __future__ import annotations

import sys

from .textworld.env import TextWorldEnv, clean_text
from .textworld.family import TextWorldFamily
from .textworld.games import (
    ROUTE_SUFFIX,
    generate_game,
    is_generated,
    main,
    play_expert,
    prepare_games,
    route_of,
    walkthrough_route,
)
from .textworld.settings import CHALLENGES, ENV_OPTIONS, FAMILY, SPLITS, GameSpec, canonical_settings, parse_settings, spec_of

__all__ = ["TextWorldEnv", "clean_text", "TextWorldFamily", "ROUTE_SUFFIX", "generate_game", "is_generated", "main",
           "play_expert", "prepare_games", "route_of", "walkthrough_route", "CHALLENGES", "ENV_OPTIONS", "FAMILY",
           "SPLITS", "GameSpec", "canonical_settings", "parse_settings", "spec_of"]

if __name__ == "__main__":
    sys.exit(main())
