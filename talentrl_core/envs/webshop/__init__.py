"""WebShop in text mode: ``env`` (pages, actions, ``WebShopEnv``, ``WebShopFamily``, the expert), ``data`` (catalogue,
goals, split, search index), ``reward`` (WebShop's purchase reward), ``spec`` (the registry entry)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"WebShopEnv": "env", "WebShopFamily": "env", "play_expert": "env", "parse_webshop_action": "env",
            "catalogue": "env", "expert_queries": "env", "FAMILY": "env"}
"""Names of the old ``envs/webshop.py`` module (bench/ imports them from here), loaded on first use: importing the
package (as the registry does for ``spec``) imports none of its modules."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
