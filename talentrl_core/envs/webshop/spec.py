"""WebShop's registry entry (``envs/registry.py``): cheap to import, the family is loaded by ``factory``."""

from __future__ import annotations

import re
from typing import Optional

from ..base import FamilySpec, lazy_family
from ..syntax import INVALID
from .queries import BUTTONS, click_target, instruction_options

_ASIN = re.compile(r"^b[0-9a-z]{9}$")
_RESULT = re.compile(r"^result \d+(:|$)")


def action_template(a: str) -> str:
    """The template of a normalised (lower-cased, single-spaced) command: ``search[{query}]``, a page button as it
    is, ``click[{product}]`` for an ASIN or a result label (``result 3: …``), ``click[{option}]`` for any other click.

    >>> action_template("search[red shoes]"), action_template("click[b07xyz1234]"), action_template("click[x-large]")
    ('search[{query}]', 'click[{product}]', 'click[{option}]')
    >>> action_template("click[result 3: acme cotton crew t-shirt]")
    'click[{product}]'
    """
    m = re.match(r"^(search|click)\[(.*)\]$", a)
    if not m:
        return INVALID
    if m.group(1) == "search":
        return "search[{query}]"
    target = m.group(2).strip()
    if target in BUTTONS:
        return f"click[{target}]"
    return "click[{product}]" if _ASIN.match(target) or _RESULT.match(target) else "click[{option}]"


def option_group(goal: str, command: str) -> Optional[str]:
    """The option group an option click sets, named as the instruction names it (``pipeline.decisions`` splits
    its option row by it): the name whose value the click names, ``other`` for a value the instruction does not
    name; None for any command that is not an option click.

    >>> goal = "Find me tops with color: c5-red, and size: small, and price lower than 30.00 dollars"
    >>> option_group(goal, "click[C5-Red]"), option_group(goal, "click[large]"), option_group(goal, "click[buy now]")
    ('color', 'other', None)
    """
    a = " ".join(str(command or "").lower().split())
    if action_template(a) != "click[{option}]":
        return None
    value = click_target(a).strip()
    return next((name for name, v in instruction_options(goal).items() if " ".join(v.split()) == value), "other")


def _memory(goal, past, observation, admissible=None):
    from .memory import memory_line

    return memory_line(goal, past, observation, admissible)


def _memory_goal(goal, past, observation, admissible=None):
    from .memory import goal_line

    return goal_line(goal, past, observation, admissible)


def _memory_goal_command(goal, past, observation, admissible=None):
    from .memory import goal_command_line

    return goal_command_line(goal, past, observation, admissible)


SPEC = FamilySpec(
    name="webshop",
    factory=lazy_family("talentrl_core.envs.webshop.env:WebShopFamily"),
    rule="You shop on a website for what the task asks. Reply with <think>brief plan</think><action>search[query] or "
         "click[one admissible button]</action>.",
    description="WebShop online shopping; the agent writes search[query] on the search page, then clicks buttons: "
    "click[<product id>] (or click[result <n>: <title words>] when search is a choice), click[next >], "
    "click[<option value>], click[buy now].",
    panels={"webshop": "test", "webshop_dev": "dev"},
    panel_help=("webshop", "webshop_dev"),
    template=action_template,
    data_fields=("webshop_products", "webshop_instructions"),
    strategies="talentrl_core.envs.webshop.strategies",
    reports_score=True,
    memory=_memory,
    memory_goal=_memory_goal,
    memory_goal_command=_memory_goal_command,
    decision_detail=option_group,
)
