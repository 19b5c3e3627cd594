"""The family registry: one ``FamilySpec`` per environment family (``envs/base.py``), loaded from each family
package's light ``spec`` module (its rule, parser, templates, panels; the family itself is imported only by
``make_family``).

Adding an environment: write ``envs/<name>/`` with a ``spec.py`` defining ``SPEC`` and add its package name to
``FAMILY_PACKAGES`` (docs/architecture.md, "How to add an environment").
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from .base import EnvFamily, FamilySpec

if TYPE_CHECKING:
    from ..config import EnvConfig

FAMILY_PACKAGES = (
    "alfworld",
    "textworld",
    "webshop",
    "qa",
)
"Family packages under ``talentrl_core/envs/``, one line each; the order is the order prompts' rules are listed."


def _load(packages: tuple[str, ...]) -> dict[str, FamilySpec]:
    specs = [importlib.import_module(f"{__package__}.{p}.spec").SPEC for p in packages]
    return {s.name: s for s in specs}


FAMILIES: dict[str, FamilySpec] = _load(FAMILY_PACKAGES)
"Family name → its spec."


def family_spec(name: str) -> FamilySpec:
    """The spec of family ``name`` (an ``EnvName`` or its value); a KeyError names the families."""
    spec = FAMILIES.get(str(name))
    if spec is None:
        raise KeyError(f"no environment family {str(name)!r}; registered: {', '.join(FAMILIES)}")
    return spec


def make_family(cfg: "EnvConfig", cache_dir: str | Path) -> EnvFamily:
    """The family for ``cfg.name`` (imports only that family's dependencies); ``env.memory`` (``env.memory_goal``) on a
    family without that line is refused by name."""
    spec = family_spec(cfg.name)
    for key, line in (("memory", "memory line"), ("memory_goal", "such line")):
        if getattr(cfg, key) and getattr(spec, key) is None:
            have = [n for n, s in FAMILIES.items() if getattr(s, key) is not None]
            raise ValueError(f"env.{key}=true: {spec.name} has no {line}; families with one: {', '.join(have)}")
    if cfg.memory_values == "command" and spec.memory_goal_command is None:
        have = [n for n, s in FAMILIES.items() if s.memory_goal_command is not None]
        raise ValueError(f"env.memory_values=command: {spec.name} spells no values as commands; families that do: "
                         f"{', '.join(have)}")
    return spec.factory(cfg, Path(cache_dir))


def panel_family(panel: str) -> tuple[str, str]:
    """(family name, split) of an evaluation panel; a ValueError names the panels there are."""
    for spec in FAMILIES.values():
        split = spec.panel_split(panel)
        if split is not None:
            return spec.name, split
    names = [n for s in FAMILIES.values() for n in s.panel_help]
    raise ValueError(f"unknown eval panel {panel!r}: use {', '.join(names[:-1])} or {names[-1]}")


def reports_score(panel: str) -> bool:
    """Whether a panel's family reports a score beside the success rate (its return rule, ``FamilySpec``)."""
    try:
        return family_spec(panel_family(panel)[0]).reports_score
    except ValueError:
        return False
