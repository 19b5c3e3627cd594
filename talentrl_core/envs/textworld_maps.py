"""Old import path of TextWorld's hand-built maps (tests/test_talents.py imports it): see ``envs/textworld/maps.py``."""

from .textworld.maps import *  # noqa: F401,F403
from .textworld.maps import MAPS, fork_commands, sign  # noqa: F401
