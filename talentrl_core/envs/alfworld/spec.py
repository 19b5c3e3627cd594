"""ALFWorld's registry entry (``envs/registry.py``): cheap to import, the family is loaded by ``factory``."""

from __future__ import annotations

from ..base import FamilySpec, lazy_family


def _procedure_of(task_type):
    from .procedures import procedure_of

    return procedure_of(task_type)


def _memory(goal, past, observation, admissible=None):
    from .memory import memory_line

    return memory_line(goal, past, observation)


SPEC = FamilySpec(
    name="alfworld",
    factory=lazy_family("talentrl_core.envs.alfworld.family:AlfworldFamily"),
    rule="You are a household agent. Reply with <think>brief plan</think><action>one admissible command</action>.",
    description="ALFWorld household tasks in text; commands look like 'go to desk 1', 'open drawer 2', "
    "'take apple 1 from desk 1', 'move apple 1 to shelf 1', 'heat/cool/clean X with Y', 'use desklamp 1'.",
    panel_prefix="alfworld_",
    panel_help=("alfworld_valid_seen", "alfworld_valid_unseen", "alfworld_valid_train"),
    recep_verbs=frozenset({"go", "open", "close"}),
    with_recep_verbs=frozenset({"heat", "cool", "clean"}),
    data_fields=("alfworld_archive",),
    strategies="talentrl_core.envs.alfworld.strategies",
    memory=_memory,
    procedure_of=_procedure_of,
    procedures="talentrl_core.envs.alfworld.procedures",
)
