"""WebShop's memory line (``env.memory``, issue 40): the item page restated so that a small policy sees it whole.

An item page lists every option value first and the product's title and price after them; the execution prompt
cuts an observation at ``env.obs_chars`` (600), so on about a third of the teacher's item pages the title and price
are cut away, and which option groups already hold a selection is spread over hundreds of characters. The memory
line restates, from the page alone: the product's title and price, and per option group its name and its selected
value or "none". It matches nothing against the instruction (which value to click is left to the policy), and it
shows nothing the page does not; it is nonetheless a deviation from WebShop's raw text mode (``docs/webshop.md``).
Other pages get no line.

``env.memory_goal`` (``goal_line``) goes one step further and sets the instruction's own words beside the page's:
after each option group the value the instruction's option clause names for a group of that name, after the price
the instruction's bound. A 6.8M model from random initialisation did not learn that lookup (a value two hops away:
group name → the instruction's ``name: value`` clause → the matching button; 0 of 80 dev option decisions, issue 40's
probe); the line does the lookup and nothing more: it does not say whether the page offers the value, and which
button to click, and whether to buy, stay the policy's choice. A declared deviation beyond ``env.memory``.

``env.memory_values=command`` (``goal_command_line``) writes each of those values in brackets, as the click command
writes it: ``size: none (task: [small])``. The byte-level tokenizer splits a value after a space differently from
after ``[`` (`` navy`` is one token, ``[navy`` is ``[``, ``n``, ``avy``), so in the plain line naming the value means
mapping one token sequence onto another per value, learnt for the frequent sizes and not for the long tail of colours
(issue 40, P5: 25 of 39 sizes, 4 of 35 colours); in brackets the command's tokens are the line's own. Same content,
another spelling.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .queries import instruction_options, price_bound
from .strategies import item_options, page_kind, page_segments


def item_page(observation: str, admissible: Sequence[str]) -> Optional[tuple[str, str, list[tuple[str, str]]]]:
    """(title, price, [(option name, selected value or "")]) of an item page; None on any other page.

    >>> page = ("Instruction: [SEP] red shirt [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] small (selected) "
    ...         "[SEP] large [SEP] color [SEP] red [SEP] Acme Shirt [SEP] Price: $9.50 [SEP] Rating: N.A. [SEP] "
    ...         "Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    >>> adm = ["click[back to search]", "click[< prev]", "click[small]", "click[large]", "click[red]", "click[buy now]"]
    >>> item_page(page, adm)
    ('Acme Shirt', '$9.50', [('size', 'small'), ('color', '')])
    >>> item_page("Instruction: [SEP] red shirt [SEP] Search", ["search[red shirt]"]) is None
    True
    """
    if page_kind(admissible) != "item":
        return None
    segs = page_segments(observation)
    at = next((i for i, seg in enumerate(segs) if seg.startswith("Price:")), 0)  # the title stands before the price
    title, price = (segs[at - 1], segs[at].removeprefix("Price:").strip()) if at else ("", "")
    return title, price, [(name, selected) for name, _, selected in item_options(observation, admissible)]


def memory_line(goal: str, past: Sequence[tuple[str, str]], observation: str,
                admissible: Optional[Sequence[str]] = None, with_goal: bool = False, as_command: bool = False) -> str:
    """The memory line of a step: on an item page its title, price and each option group's selection; else "".
    ``with_goal`` (``env.memory_goal``, ``goal_line``): beside each group the value the instruction names for it
    (``any`` when it names none), beside the price the instruction's bound; ``as_command``: each such value in
    brackets, as the click command writes it (``env.memory_values=command``).

    >>> page = ("Instruction: [SEP] red shirt [SEP] Back to Search [SEP] < Prev [SEP] size [SEP] small [SEP] large "
    ...         "(selected) [SEP] Acme Shirt [SEP] Price: $9.50 [SEP] Rating: N.A. [SEP] Description [SEP] Features "
    ...         "[SEP] Reviews [SEP] Buy Now")
    >>> adm = ["click[small]", "click[large]", "click[buy now]"]
    >>> memory_line("red shirt", [], page, adm)
    'Memory: item Acme Shirt; price $9.50; size: large'
    >>> memory_line("red shirt", [], page.replace(" (selected)", ""), adm)
    'Memory: item Acme Shirt; price $9.50; size: none'
    >>> memory_line("Find a shirt with Size: small, and price lower than 20.00 dollars", [], page, adm, with_goal=True)
    'Memory: item Acme Shirt; price $9.50 (task: lower than $20.00); size: large (task: small)'
    >>> memory_line("Find a shirt", [], page, adm, with_goal=True)
    'Memory: item Acme Shirt; price $9.50 (task: any); size: large (task: any)'
    >>> memory_line("Find a shirt with Size: small, and price lower than 20.00 dollars", [], page, adm, True, True)
    'Memory: item Acme Shirt; price $9.50 (task: lower than $20.00); size: large (task: [small])'
    """
    item = item_page(observation, admissible or ())
    if item is None:
        return ""
    title, price, groups = item
    price = price or "not shown"
    if with_goal:
        wanted, bound = instruction_options(goal), price_bound(goal)
        price += f" (task: {f'lower than ${bound:.2f}' if bound is not None else 'any'})"
        spell = "[{}]".format if as_command else str
        groups = [(name, f"{value or 'none'} (task: {spell(wanted[k]) if (k := name.strip().lower()) in wanted else 'any'})")
                  for name, value in groups]
    parts = [f"item {title or 'unnamed'}", f"price {price}"]
    parts += [f"{name}: {value or 'none'}" for name, value in groups]
    return "Memory: " + "; ".join(parts)


def goal_line(goal: str, past: Sequence[tuple[str, str]], observation: str,
              admissible: Optional[Sequence[str]] = None) -> str:
    """``memory_line`` with the instruction's words beside the page's (``env.memory_goal``)."""
    return memory_line(goal, past, observation, admissible, with_goal=True)


def goal_command_line(goal: str, past: Sequence[tuple[str, str]], observation: str,
                      admissible: Optional[Sequence[str]] = None) -> str:
    """``goal_line`` with the task's values spelled as the click command spells them (``env.memory_values=command``)."""
    return memory_line(goal, past, observation, admissible, with_goal=True, as_command=True)
