"""Action templates: concrete commands → abstract steps, the alphabet of the offline distiller.

Entity names become placeholders so that trajectories of different games share patterns:

* ALFWorld: ``go to desk 1`` → ``go to {recep}``; ``take apple 2 from desk 1`` → ``take {obj} from {recep}``;
  ``heat apple 1 with microwave 1`` → ``heat {obj} with {recep}``; ``look`` stays.
* TextWorld: directions stay (``go east``); ``take coin`` → ``take {obj}``;
  ``unlock wooden door with key`` → ``unlock {obj} with {tool}``.
* WebShop: ``search[…]`` → ``search[{query}]``; page buttons stay (``click[buy now]``, ``click[next >]``);
  ``click[b07…]`` → ``click[{product}]``; any other click chooses an option → ``click[{option}]``.
* QA (Search-R1 protocol): ``<search>…</search>`` → ``search {query}``; ``<answer>…</answer>`` → ``answer``.

The per-family parts come from the family's ``FamilySpec`` (``envs/registry.py``): its own ``template`` (WebShop,
QA), or the verbs whose object is a receptacle for the generic verb/preposition templates (ALFWorld).

An invalid step (``valid=False``: unparseable or inadmissible) is ``(invalid command)``. A run of equal
templates collapses to one step, marked ``[repeated]`` (different commands, e.g. visiting several
receptacles) or ``[same command repeated]`` (the identical command again: a loop).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ..envs.registry import FAMILIES
from ..envs.syntax import INVALID

REPEATED = " [repeated]"
SAME_REPEATED = " [same command repeated]"
"Routing steps are stored with action ``talent:<id>``; they are not environment actions."

DIRECTIONS = {"north", "south", "east", "west", "up", "down", "northeast", "northwest", "southeast", "southwest"}
FIXED = {"look", "inventory", "help", "wait", "prepare meal", "score", "goal"}
PREPOSITIONS = ("from", "into", "onto", "in", "on", "to", "with", "under")
_NO_SLOTS: tuple[frozenset, frozenset] = (frozenset(), frozenset())


def _slot(slots: tuple[frozenset, frozenset], verb: str, prep: Optional[str]) -> str:
    """The placeholder of a phrase: ``slots`` are the family's (receptacle verbs, ``with``-receptacle verbs)."""
    if prep is None:
        return "recep" if verb in slots[0] else "obj"
    if prep == "with":
        return "recep" if verb in slots[1] else "tool"
    return "recep"


def abstract_action(env: str, action: Optional[str], valid: bool = True) -> str:
    """The template of one command.

    >>> abstract_action("alfworld", "go to desk 1")
    'go to {recep}'
    >>> abstract_action("alfworld", "take apple 2 from desk 1")
    'take {obj} from {recep}'
    >>> abstract_action("alfworld", "heat apple 1 with microwave 1")
    'heat {obj} with {recep}'
    >>> abstract_action("textworld", "go east"), abstract_action("textworld", "take coin")
    ('go east', 'take {obj}')
    >>> abstract_action("textworld", "unlock wooden door with old key")
    'unlock {obj} with {tool}'
    >>> abstract_action("qa", "<search>capital of France</search>"), abstract_action("qa", "<answer>Paris</answer>")
    ('search {query}', 'answer')
    >>> abstract_action("webshop", "search[red shoes]"), abstract_action("webshop", "click[B07XYZ1234]")
    ('search[{query}]', 'click[{product}]')
    >>> abstract_action("webshop", "click[buy now]"), abstract_action("webshop", "click[x-large]")
    ('click[buy now]', 'click[{option}]')
    >>> abstract_action("alfworld", "go to desk 1", valid=False)
    '(invalid command)'
    """
    if not valid or not action or not action.strip():
        return INVALID
    a = " ".join(action.split()).lower()
    spec = FAMILIES.get(str(env))
    if spec is not None and spec.template is not None:  # a family with its own action syntax (WebShop, QA)
        return spec.template(a)
    slots = (spec.recep_verbs, spec.with_recep_verbs) if spec is not None else _NO_SLOTS
    if a in FIXED:
        return a
    words = a.split()
    verb = words[0]
    if verb == "go" and len(words) == 2 and words[1] in DIRECTIONS:
        return a
    if verb in DIRECTIONS and len(words) == 1:
        return f"go {verb}"
    if verb == "go" and len(words) > 2 and words[1] == "to":
        return "go to {recep}"
    out = [verb]
    prep: Optional[str] = None
    phrase: list[str] = []
    for w in words[1:]:
        if w in PREPOSITIONS and phrase:
            out.append("{" + _slot(slots, verb, prep) + "}")
            out.append(w)
            prep, phrase = w, []
        else:
            phrase.append(w)
    if phrase:
        out.append("{" + _slot(slots, verb, prep) + "}")
    return " ".join(out)


def collapse(templates: Sequence[str], concrete: Sequence[str], mark: bool = True) -> tuple[list[str], list[str]]:
    """Collapse runs of equal templates; returns (tokens, the concrete command(s) of each token).

    ``mark=False`` leaves runs unmarked (the coarse level of ``trajectory_tokens``).

    >>> collapse(["go to {recep}", "go to {recep}", "take {obj} from {recep}"], ["go to desk 1", "go to shelf 1", "take pen 1 from shelf 1"])[0]
    ['go to {recep} [repeated]', 'take {obj} from {recep}']
    >>> collapse(["look", "look"], ["look", "look"])[0]
    ['look [same command repeated]']
    """
    tokens: list[str] = []
    conc: list[str] = []
    i = 0
    while i < len(templates):
        j = i
        while j + 1 < len(templates) and templates[j + 1] == templates[i]:
            j += 1
        run = list(concrete[i : j + 1])
        if j == i:
            tokens.append(templates[i])
            conc.append(run[0])
        elif not mark:
            tokens.append(templates[i])
            conc.append(", ".join(run[:3]) + (", ..." if len(run) > 3 else ""))
        elif len(set(run)) == 1:
            tokens.append(templates[i] + SAME_REPEATED)
            conc.append(f"{run[0]} (x{len(run)})")
        else:
            tokens.append(templates[i] + REPEATED)
            conc.append(", ".join(run[:3]) + (", ..." if len(run) > 3 else ""))
        i = j + 1
    return tokens, conc


def unmarked(token: str) -> str:
    """``token`` without its run mark (``collapse``'s ``[repeated]`` / ``[same command repeated]``).

    >>> unmarked("go north [same command repeated]"), unmarked("go to {recep} [repeated]"), unmarked("take {obj}")
    ('go north', 'go to {recep}', 'take {obj}')
    """
    return token.removesuffix(SAME_REPEATED).removesuffix(REPEATED)


def coarsen(token: str) -> str:
    """The back-off level used in mining: run marks dropped, a compass move becomes ``go {dir}``.

    >>> coarsen("go east"), coarsen("go to {recep} [repeated]"), coarsen("look [same command repeated]")
    ('go {dir}', 'go to {recep}', 'look')
    """
    token = unmarked(token)
    w = token.split()
    return "go {dir}" if len(w) == 2 and w[0] == "go" and w[1] in DIRECTIONS else token


def trajectory_tokens(env: str, steps: Iterable, coarse: bool = False) -> tuple[list[str], list[str]]:
    """Abstract steps of a trajectory (routing steps skipped, runs collapsed) and their concrete commands.

    ``coarse=True`` is the back-off level: compass directions become ``go {dir}`` and runs are not
    marked, so games whose routes or search lengths differ still share patterns.
    """
    templates, concrete = [], []
    for s in steps:
        if s.is_routing:
            continue
        t = abstract_action(env, s.action, s.valid)
        templates.append(coarsen(t) if coarse else t)
        concrete.append(" ".join((s.action or "").split()) or "(empty)")
    return collapse(templates, concrete, mark=not coarse)


def short_verb(token: str) -> str:
    """The words of a token before its first placeholder, for titles.

    >>> short_verb("take {obj} from {recep}"), short_verb("go to {recep} [repeated]"), short_verb("go east")
    ('take', 'go to (repeated)', 'go east')
    """
    suffix = ""
    if token.endswith(SAME_REPEATED):
        token, suffix = token[: -len(SAME_REPEATED)], " (same again)"
    elif token.endswith(REPEATED):
        token, suffix = token[: -len(REPEATED)], " (repeated)"
    if token == INVALID:
        return "invalid command" + suffix
    head = token.split("{")[0].strip()
    return (head or token) + suffix


def render_token(token: str) -> str:
    """One abstract step for people.

    >>> render_token("go {dir} [repeated]"), render_token("look [same command repeated]"), render_token(INVALID)
    ('go {dir} (several times)', 'look (the same command, repeatedly)', 'an invalid command')
    """
    suffix = ""
    if token.endswith(SAME_REPEATED):
        token, suffix = token[: -len(SAME_REPEATED)], " (the same command, repeatedly)"
    elif token.endswith(REPEATED):
        token, suffix = token[: -len(REPEATED)], " (several times)"
    return ("an invalid command" if token == INVALID else token) + suffix


def render_steps(pattern: Sequence[str]) -> str:
    """Join abstract steps into a phrase.

    >>> render_steps(["go to {recep}", "take {obj} from {recep}"])
    'go to {recep}, then take {obj} from {recep}'
    """
    return ", then ".join(render_token(t) for t in pattern)


def type_label(task_type: str) -> str:
    """A task type for people.

    >>> type_label("tw-coin_collector"), type_label("pick_heat_then_place_in_recep")
    ('coin collector', 'pick heat then place in recep')
    """
    return task_type.removeprefix("tw-").replace("_", " ").strip() or task_type
