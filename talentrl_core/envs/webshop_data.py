"""Old import path of WebShop's data module (bench/ imports it): see ``envs/webshop/data.py``."""

from .webshop.data import *  # noqa: F401,F403
from .webshop.data import CatalogueError, Product, SearchIndex, goal_key, load_catalogue  # noqa: F401
