"""Old import path of TextWorld's strategy experts (bench/, tests/test_talents.py import it): see
``envs/textworld/strategies.py``."""

from .textworld.strategies import *  # noqa: F401,F403
from .textworld.strategies import HEADINGS, REVERSE, goal_route, hide_route, hint_route, quadrant_of  # noqa: F401
