"""Environment families behind one protocol (``base.Env`` / ``base.EnvFamily``), one package each
(``alfworld/``, ``textworld/``, ``webshop/``, ``qa/``), listed in ``registry.FAMILIES``."""

from __future__ import annotations

from .registry import FAMILIES, family_spec, make_family

__all__ = ["FAMILIES", "family_spec", "make_family"]
