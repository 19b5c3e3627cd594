"""WebShop's instruction-derived text, shared by the env (``env.webshop_search: choice``) and the observation-only
teacher (``webshop.strategies``): everything here is a function of what the page shows, never of the goal record.

- ``search_candidates``: the small fixed set of queries the search page offers in choice mode (WebShop's own IL+RL
  agent chose among candidate queries and never typed one): the whole instruction, the instruction without its
  option and price clauses, and its first clause (up to its first ``with``), duplicates dropped, in that order;
- ``instruction_options``: the ``name: value`` pairs of the instruction's option clause;
- ``result_label``: how a search result is clicked in choice mode, by its rank and the first words of its visible
  title (``result 3: acme cotton crew t-shirt …``), instead of by its ASIN;
- ``BUTTONS`` and ``click_target``: a page's fixed buttons, and what a ``click[…]`` command names.

Synthetic instructions read ``<base> with <name>: <value>, and <name>: <value>, and price lower than X dollars``;
the base never contains a colon, so the option clause starts at the last `` with `` before the first colon.
"""

from __future__ import annotations

import re
from typing import Optional

BUTTONS = frozenset({"back to search", "next >", "< prev", "buy now", "description", "features", "reviews"})
"The buttons of WebShop's pages (lower-cased): every other click is a result or an option value."
LABEL_WORDS = 8
"Title words in a result's click label (choice mode); the rank makes the label unique."
_PRICE = re.compile(r",? and price lower than [0-9][0-9.,]* dollars\s*$", re.IGNORECASE)
_OPTIONS = re.compile(r" with [a-z][a-z ]{0,30}: $", re.IGNORECASE)
_RESULT = re.compile(r"^result (\d+)(?::|$)")
_WORD = re.compile(r"[a-z0-9]+")


def click_target(command: str) -> str:
    """What a command names: ``click[large]`` → ``large`` (the command itself when it has no brackets).

    >>> click_target("click[< prev]"), click_target("search[red shoes]"), click_target("look")
    ('< prev', 'red shoes', 'look')
    """
    return command[command.index("[") + 1:-1] if "[" in command else command
STOP = frozenset(
    "a an and the for with of in on to by from at or as is are be this that it its i me my you your find need want "
    "looking buy get please price lower than dollars".split()
)
"Words that say nothing about a product (word overlap of the teacher and the rule baselines)."


def _clean(text: str) -> str:
    return " ".join(str(text).split())


def split_instruction(text: str) -> tuple[str, str, str]:
    """(base, option clause, price clause) of an instruction's visible text; missing parts are empty.

    >>> split_instruction("Find me red shoes with rubber sole with color: red, and size: 9, and price lower than 40.00 dollars")
    ('Find me red shoes with rubber sole', 'color: red, and size: 9', 'price lower than 40.00 dollars')
    """
    text = _clean(text)
    price = ""
    m = _PRICE.search(text)
    if m:
        price, text = m.group(0).lstrip(", ").removeprefix("and ").strip(), text[:m.start()]
    colon = text.find(": ")
    cut = text.lower().rfind(" with ", 0, colon) if colon > 0 else -1
    if cut >= 0 and _OPTIONS.match(text[cut:colon + 2]):
        return text[:cut].strip(), text[cut + len(" with "):].strip(), price
    return text.strip(), "", price


def search_candidates(instruction: str) -> list[str]:
    """The choice-mode search queries of an instruction, deterministic, duplicates dropped, in a fixed order."""
    base, _, _ = split_instruction(instruction)
    first = re.split(r" with ", base, maxsplit=1, flags=re.IGNORECASE)[0].strip()
    out: list[str] = []
    for q in (_clean(instruction), base, first):
        if q and q.lower() not in {o.lower() for o in out}:
            out.append(q)
    return out


def instruction_options(instruction: str) -> dict[str, str]:
    """``{name: value}`` of the instruction's option clause (lower-cased); empty when it has none.

    >>> instruction_options("Find me tops with color: c5-red, and size: small, and price lower than 30.00 dollars")
    {'color': 'c5-red', 'size': 'small'}
    """
    _, clause, _ = split_instruction(instruction)
    out: dict[str, str] = {}
    for part in re.split(r", and (?=[a-z][a-z ]{0,30}: )", clause, flags=re.IGNORECASE) if clause else []:
        name, _, value = part.partition(": ")
        if value:
            out[name.strip().lower()] = value.strip().lower()
    return out


def price_bound(instruction: str) -> Optional[float]:
    """The instruction's price bound in dollars, or None when it states none."""
    m = re.search(r"price lower than ([0-9][0-9.,]*) dollars", instruction, re.IGNORECASE)
    return float(m.group(1).replace(",", "").rstrip(".")) if m else None


def words(text: str) -> set[str]:
    """Content words of a text (lower-cased alphanumeric runs minus ``STOP``)."""
    return {w for w in _WORD.findall(str(text).lower()) if w not in STOP}


def result_label(rank: int, title: str) -> str:
    """The click label of the search result at ``rank`` (1-based over all pages): rank and first title words."""
    head = " ".join(_clean(title).lower().replace("[", "(").replace("]", ")").split()[:LABEL_WORDS])
    return f"result {rank}: {head}" if head else f"result {rank}"


def label_rank(target: str) -> Optional[int]:
    """The rank a choice-mode result click names (``result 3: …`` → 3), else None."""
    m = _RESULT.match(target)
    return int(m.group(1)) if m else None
