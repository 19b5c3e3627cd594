"""ALFWorld's task procedures: one talent per task type (issue 39, ``library.talents_by=procedure``).

The two search orders (``strategies``) barely differ per task on ALFWorld (``docs/results/alfworld-strategies-2026-12-02``):
one search wins nearly everywhere, so talents named after them have nothing to route. What ALFWorld's task structure
does offer is the procedure each task type asks for after the search: carry the object straight to the goal's
receptacle, clean / heat / cool it first, fetch a second one, or take it to a lamp. With ``talents_by=procedure`` the
distiller forms one talent per procedure from the same teacher trajectories (whatever search produced them), with
these descriptions first in its strategy text; the strategy column of the trajectories is kept.
"""

from __future__ import annotations

from typing import Optional

PROCEDURES: dict[str, tuple[str, str]] = {
    "pick_and_place_simple": ("place", "Find an object of the goal's class, take it and put it in or on the goal's receptacle."),
    "pick_two_obj_and_place": ("two-objects", "Find one object of the goal's class and put it in the goal's receptacle, then "
                               "find a second one of the same class and put it in the same receptacle."),
    "pick_clean_then_place_in_recep": ("clean", "Find the object, take it, clean it with the sinkbasin, then put it in or "
                                       "on the goal's receptacle."),
    "pick_heat_then_place_in_recep": ("heat", "Find the object, take it, heat it with the microwave, then put it in or on "
                                      "the goal's receptacle."),
    "pick_cool_then_place_in_recep": ("cool", "Find the object, take it, cool it with the fridge, then put it in or on the "
                                      "goal's receptacle."),
    "look_at_obj_in_light": ("look-in-light", "Find the object and take it, then find the lamp the goal names and use it "
                             "while holding the object."),
}
"ALFWorld task type → (procedure name, what the procedure does)."


def procedure_of(task_type: str) -> Optional[str]:
    """The procedure of an ALFWorld task type (None: not one of ALFWorld's six).

    >>> procedure_of("pick_heat_then_place_in_recep"), procedure_of("tw-coin_collector")
    ('heat', None)
    """
    entry = PROCEDURES.get(task_type)
    return entry[0] if entry else None


DESCRIPTIONS: dict[str, str] = {name: text for name, text in PROCEDURES.values()}
"Procedure name → its description (the talent's strategy text starts with it)."
