"""Environment families behind one protocol (``base.Env`` / ``base.EnvFamily``)."""

from __future__ import annotations

from pathlib import Path

from ..config import EnvConfig, EnvName


def make_family(cfg: EnvConfig, cache_dir: str | Path):
    """The family for ``cfg.name`` (imports only that family's dependencies)."""
    name = EnvName(cfg.name)
    if name == EnvName.alfworld:
        from .alfworld import AlfworldFamily

        return AlfworldFamily(cfg, Path(cache_dir))
    if name == EnvName.textworld:
        from .textworld_env import TextWorldFamily

        return TextWorldFamily(cfg, Path(cache_dir))
    if name == EnvName.webshop:
        from .webshop import WebShopFamily

        return WebShopFamily(cfg, Path(cache_dir))
    from .qa import QAFamily

    return QAFamily(cfg, Path(cache_dir))
