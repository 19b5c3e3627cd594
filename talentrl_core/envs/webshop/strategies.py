"""WebShop's strategy experts (``envs/strategies.py``): an imitable teacher that acts only on what the agent sees.

The env's ``expert_action`` is privileged: it opens the goal product by its ASIN, which no page names, so a policy
that imitates it learns to guess. These strategies read only the ``EpisodeView`` (the instruction, the page text,
the admissible commands, their own past actions) and work in both search modes (``env.webshop_search``):

1. search the whole instruction (the first of ``queries.search_candidates``: listed on the search page in choice
   mode, computed from the instruction in free mode); after a search with no result, the next candidate;
2. open a result and read its item page: it fits when it offers every option value the instruction names
   (``<name>: <value>`` in its option clause) at a shown price within the instruction's bound; else go back and
   open the next result. After ``MAX_VISITS`` item pages it settles for the one that fitted best;
3. click each named option value the page offers and has not selected yet, then buy.

The two strategies differ in the order they open results: ``rank_order`` in the page's order, ``title_order`` by
the content words a result's visible title shares with the instruction, less one per rank. Measured on 400 train
goals, the whole instruction puts the goal product in the top 10 for 358 of them, its option-less base for 197 and
its first clause for 203; and BM25's first result is the goal product more often (175) than the result with the
best title overlap (157), because the index holds the options and description that a results page does not show.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from ..strategies import EpisodeView, Strategy, register
from .queries import BUTTONS, click_target, instruction_options, label_rank, price_bound, search_candidates, words

SEP = " [SEP] "
_ASIN = re.compile(r"^b[0-9a-z]{9}$")
_PRICE = re.compile(r"\$\s*([0-9][0-9,]*(?:\.[0-9]+)?)")
MAX_VISITS = 4
"Item pages the teacher opens before it settles for the best one: 1 search + 4 × 2 + 1 + 3 options + buy = 14."


def page_kind(admissible: Sequence[str]) -> str:
    """search, results, item or subpage, from the admissible commands alone."""
    targets = [click_target(a) for a in admissible]
    if not targets or all(a.startswith("search[") for a in admissible):
        return "search"
    if "buy now" in targets:
        return "item"
    return "subpage" if set(targets) == {"back to search", "< prev"} else "results"


def _results(view: EpisodeView) -> list[str]:
    """The admissible result clicks of a results page (an ASIN or a ``result <n>: …`` label)."""
    return [t for t in map(click_target, view.admissible) if _ASIN.match(t) or label_rank(t) is not None]


def _shown(view: EpisodeView, target: str) -> tuple[str, Optional[float]]:
    """(title, price) the page shows for a result: the two segments after its ASIN or its ``result <n>``."""
    segs = [s.strip() for s in view.observation.split("[SEP]")]
    key = target.upper() if _ASIN.match(target) else f"result {label_rank(target)}"
    for i, s in enumerate(segs[:-1]):
        if s == key:
            m = _PRICE.search(segs[i + 2]) if i + 2 < len(segs) else None
            return segs[i + 1], float(m.group(1).replace(",", "")) if m else None
    return target, None


def _order(view: EpisodeView, by_title: bool) -> list[str]:
    """The page's results in the order the teacher visits them: page order, or by title words shared with the
    instruction less one per rank below the first (``by_title``); a price above the bound costs half a word."""
    results = _results(view)
    if not by_title:
        return results
    want, bound = words(view.goal), price_bound(view.goal)

    def score(i: int) -> float:
        title, price = _shown(view, results[i])
        return len(words(title) & want) - i - (0.5 if bound is not None and price is not None and price > bound else 0)

    return [results[i] for i in sorted(range(len(results)), key=lambda i: (-score(i), i))]


def page_segments(page: str) -> list[str]:
    return [s.strip() for s in page.split("[SEP]")]


def fit(view_goal: str, page: str) -> int:
    """How well an item page fits the instruction: option values it names that the page offers, plus one when the
    shown price is within the bound (the goal product scores ``len(options) + 1``)."""
    segs = {s.removesuffix(" (selected)") for s in page_segments(page)}
    named = instruction_options(view_goal).values()
    bound = price_bound(view_goal)
    price = next((float(m.group(1).replace(",", "")) for s in page_segments(page) if s.startswith("Price:")
                  for m in [_PRICE.search(s)] if m), None)
    return sum(v in segs for v in named) + int(bound is None or price is None or price <= bound)


def _visits(view: EpisodeView) -> list[tuple[str, int]]:
    """(result clicked, fit of the item page it opened) since the last search."""
    out: list[tuple[str, int]] = []
    for action, obs in view.transcript:
        target = click_target(action).lower()
        if action.lower().startswith("search["):
            out = []
        elif _ASIN.match(target) or label_rank(target) is not None:
            out.append((target, fit(view.goal, obs)))
    return out


def wanted_options(view: EpisodeView) -> list[str]:
    """Option values the instruction names that this item page offers and has not selected yet."""
    offered = [t for t in map(click_target, view.admissible) if t not in BUTTONS]
    selected = {s[: -len(" (selected)")] for s in page_segments(view.observation) if s.endswith(" (selected)")}
    named = set(instruction_options(view.goal).values())
    return [v for v in offered if v in named and v not in selected]


def _searches(view: EpisodeView) -> int:
    return sum(1 for a, _ in view.transcript if a.lower().startswith("search["))


def teacher(first: int, by_title: bool):
    """The teacher's ``act``: ``first`` query candidate, results visited in page or title order (``by_title``)."""

    def act(view: EpisodeView) -> Optional[str]:
        kind = page_kind(view.admissible)
        if kind == "search":
            listed = [click_target(a) for a in view.admissible]
            queries = listed or search_candidates(view.goal)
            order = queries[first:] + queries[:first] if first < len(queries) else queries
            return f"search[{order[min(_searches(view), len(order) - 1)]}]"
        visits = _visits(view)
        if kind == "results":
            if len(visits) >= MAX_VISITS:  # settle for the best visited (the earliest among equals)
                return f"click[{max(visits, key=lambda v: v[1])[0]}]"
            seen = {t for t, _ in visits}
            todo = [t for t in _order(view, by_title) if t not in seen]
            return f"click[{todo[0]}]" if todo else "click[back to search]"
        if kind == "subpage":
            return "click[< prev]"
        if len(visits) <= MAX_VISITS and fit(view.goal, view.observation) < len(instruction_options(view.goal)) + 1:
            return "click[< prev]"  # not every named option on offer, or too dear: look at the next result
        todo = wanted_options(view)
        return f"click[{todo[0]}]" if todo else "click[buy now]"

    return act


RANK_ORDER = register(Strategy(
    "webshop", "rank_order",
    "Search the whole instruction, open the results in page order until one offers every option the instruction "
    "names within its price (at most 4, else the best of them), choose those options, buy.",
    teacher(0, by_title=False),
))
TITLE_ORDER = register(Strategy(
    "webshop", "title_order",
    "Search the whole instruction, open the results whose titles share the most words with the instruction first "
    "until one offers every option the instruction names within its price (at most 4), choose those options, buy.",
    teacher(0, by_title=True),
))


# ---- rule baselines (zero-parameter floors; never teachers) ------------------------------------------------------
_TOKEN = re.compile(r"[a-z0-9]+")


def item_options(observation: str, admissible: Sequence[str]) -> list[tuple[str, list[str], str]]:
    """(name, values, selected value or "") of each option group of an item page, in page order: the runs of
    admissible values, each named by the segment before it.

    >>> page = "< Prev [SEP] size [SEP] small (selected) [SEP] large [SEP] color [SEP] red [SEP] Acme Shirt"
    >>> item_options(page, ["click[< prev]", "click[small]", "click[large]", "click[red]", "click[buy now]"])
    [('size', ['small', 'large'], 'small'), ('color', ['red'], '')]
    """
    offered = {t for t in map(click_target, admissible) if t not in BUTTONS}
    groups: list[tuple[str, list[str], str]] = []
    name, in_run = "", False
    for seg in page_segments(observation):
        value = seg.removesuffix(" (selected)").lower()
        if value not in offered:
            name, in_run = seg, False
            continue
        if not in_run:
            groups.append((name, [], ""))
            in_run = True
        group = groups[-1]
        group[1].append(value)
        if seg.endswith(" (selected)"):
            groups[-1] = (group[0], group[1], value)
    return groups


def option_groups(view: EpisodeView) -> list[list[str]]:
    """The item page's option groups' values, in page order (``item_options``)."""
    return [values for _, values, _ in item_options(view.observation, view.admissible)]


def rule(options: bool):
    """WebShop's rule baseline: search the whole instruction, open the first result, (``options``: in each option
    group click the first value whose words all occur in the instruction,) buy."""

    def act(view: EpisodeView) -> Optional[str]:
        kind = page_kind(view.admissible)
        if kind == "search":
            listed = [click_target(a) for a in view.admissible]
            return f"search[{(listed or search_candidates(view.goal))[0]}]"
        if kind == "results":
            results = _results(view)
            return f"click[{results[0]}]" if results and not _visits(view) else "click[back to search]"
        if kind == "subpage":
            return "click[< prev]"
        if options:
            want, done = set(_TOKEN.findall(view.goal.lower())), {click_target(a).lower() for a, _ in view.transcript}
            for group in option_groups(view):
                match = next((v for v in group if set(_TOKEN.findall(v)) <= want), None)
                if match is not None and match not in done:
                    return f"click[{match}]"
        return "click[buy now]"

    return act


RULE_FIRST = register(Strategy(
    "webshop", "rule_first", "Search the whole instruction, open the first result, buy (WebShop's rule baseline).",
    rule(options=False), teacher=False,
))
RULE_OPTIONS = register(Strategy(
    "webshop", "rule_options",
    "Search the whole instruction, open the first result, in each option group click the first value whose words "
    "all occur in the instruction, buy.",
    rule(options=True), teacher=False,
))
