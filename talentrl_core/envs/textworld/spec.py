"""TextWorld's registry entry (``envs/registry.py``): cheap to import, the family is loaded by ``factory``."""

from __future__ import annotations

from ..base import FamilySpec, lazy_family



SPEC = FamilySpec(
    name="textworld",
    factory=lazy_family("talentrl_core.envs.textworld.family:TextWorldFamily"),
    rule="You play a text game. Reply with <think>brief plan</think><action>one admissible command</action>.",
    description="TextWorld text-adventure games; commands look like 'go east', 'open door', 'take coin', "
    "'unlock door with key', 'put X on Y'.",
    panels={"textworld": "eval"},
    panel_help=("textworld",),
    strategies="talentrl_core.envs.textworld.strategies",
)
