"""TextWorld's registry entry (``envs/registry.py``): cheap to import, the family is loaded by ``factory``."""

from __future__ import annotations

from pathlib import Path

from ..base import FamilySpec


def _factory(cfg, cache_dir: Path):
    from .family import TextWorldFamily

    return TextWorldFamily(cfg, cache_dir)


SPEC = FamilySpec(
    name="textworld",
    factory=_factory,
    rule="You play a text game. Reply with <think>brief plan</think><action>one admissible command</action>.",
    description="TextWorld text-adventure games; commands look like 'go east', 'open door', 'take coin', "
    "'unlock door with key', 'put X on Y'.",
    panels={"textworld": "eval"},
    panel_help=("textworld",),
    strategies="talentrl_core.envs.textworld.strategies",
)
