"""Old import path of ALFWorld's strategy experts (bench/ imports it): see ``envs/alfworld/strategies.py``."""

from .alfworld.strategies import *  # noqa: F401,F403
from .alfworld.strategies import CLOSED_CLASSES, containers_first, parse_goal, recall, surfaces_first  # noqa: F401
