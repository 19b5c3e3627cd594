"""WebShop in text mode (DESIGN.md §2 protocol): search, browse, choose options, buy.

Pages and actions as in WebShop's ``WebAgentTextEnv`` with ``observation_mode='text'`` (``[SEP]``-joined
visible text), pure Python over the 1,000-product catalogue (``webshop.data``):

- search page → ``search[query]`` (``env.webshop_search: free``, WebShop's: an open action, ``admissible_actions``
  is None there and the policy writes the query; ``choice``: one of ``queries.search_candidates``, listed);
- results page (10 per page, at most 50 results) → ``click[<asin>]`` (free; choice: ``click[result <rank>: <first
  title words>]``, the page shows no ASIN), ``click[next >]``, ``click[< prev]``, ``click[back to search]``;
- item page → ``click[<option value>]``, ``click[description]`` / ``click[features]`` / ``click[reviews]``,
  ``click[buy now]``, ``click[< prev]``, ``click[back to search]``; the sub-pages go back with ``click[< prev]``.

Clicks are case-insensitive (WebShop lower-cases them). Buying ends the episode with WebShop's reward
(``webshop.reward``); success is a reward of 1.0. An action that is not available on the page is invalid:
the env says so, shows the page again and nothing changes.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ...benchdata import data_path
from ...config import EnvConfig
from ..base import INVALID_ACTION_OBS, EnvFamily, StepResult, Task
from ..strategies import EpisodeView, get_strategy
from .data import (
    Product,
    SearchIndex,
    catalogue_fingerprint,
    displayed_price,
    goal_key,
    load_catalogue,
    load_instructions,
    split_goals,
    synthetic_goals,
)
from .queries import label_rank, result_label, search_candidates
from .reward import purchase_reward

FAMILY = "webshop"
PER_PAGE = 10
MAX_RESULTS = 50
SUBPAGES = ("description", "features", "reviews")
SEARCH_MODES = ("free", "choice")
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


@dataclass
class _Page:
    kind: str = "search"
    "search, results, item, or one of SUBPAGES."
    query: str = ""
    results: list[str] = field(default_factory=list)
    page: int = 1
    asin: Optional[str] = None
    options: dict[str, str] = field(default_factory=dict)


class WebShopCatalogue:
    """Products, goals, split and search index of one catalogue, loaded once per process and shared by envs."""

    def __init__(self, cfg: EnvConfig, cache_dir: Path):
        self.products: dict[str, Product] = load_catalogue(data_path(cfg.webshop_products))
        instructions = load_instructions(data_path(cfg.webshop_instructions))
        self.seed = cfg.webshop_seed
        self.goals = synthetic_goals(self.products, instructions, self.seed)
        if not 1 <= cfg.webshop_n_test + cfg.webshop_n_dev < len(self.goals):  # else train is empty: 0 episodes
            raise ValueError(f"env.webshop_n_test={cfg.webshop_n_test} + env.webshop_n_dev={cfg.webshop_n_dev}: must "
                             f"be in [1, {len(self.goals) - 1}]: {cfg.webshop_products} gives {len(self.goals)} goals; "
                             "the test split takes env.webshop_n_test of them (WebShop's own split: 500), the dev "
                             "split env.webshop_n_dev and the train split the rest")
        self.splits = split_goals(self.goals, self.seed, cfg.webshop_n_test, cfg.webshop_n_dev)
        self.by_key = {goal_key(g): g for g in self.goals}
        self.prices = {a: displayed_price(p, self.seed) for a, p in self.products.items()}
        index_dir = None  # only the mmap backend saves an index (named by the catalogue's hash: read only then)
        if cfg.webshop_index == "mmap":
            index_dir = cache_dir / FAMILY / f"bm25-{catalogue_fingerprint(data_path(cfg.webshop_products))}"
        self.index = SearchIndex(self.products, backend=cfg.webshop_index, index_dir=index_dir)


_CATALOGUES: dict[tuple, WebShopCatalogue] = {}


def catalogue(cfg: EnvConfig, cache_dir: Path) -> WebShopCatalogue:
    key = (cfg.webshop_products, cfg.webshop_instructions, cfg.webshop_seed, cfg.webshop_n_test, cfg.webshop_n_dev,
           cfg.webshop_index,
           str(cache_dir))
    if key not in _CATALOGUES:
        _CATALOGUES[key] = WebShopCatalogue(cfg, cache_dir)
    return _CATALOGUES[key]


def expert_queries(goal: dict, search: str = "free") -> list[str]:
    """The privileged expert's searches, in order. free: the whole instruction, then its first clause and the
    product type; choice: the search page's candidates (``queries.search_candidates``)."""
    if search == "choice":
        return search_candidates(goal["instruction_text"])
    return [goal["instruction_text"], f"{goal['base_instruction']} {goal['query']}"]


def parse_webshop_action(action: str) -> Optional[tuple[str, str]]:
    """``("search", query)`` or ``("click", lower-cased target)``; None when it is neither.

    >>> parse_webshop_action("click[Buy Now]")
    ('click', 'buy now')
    >>> parse_webshop_action("search[ red  shoes ]")
    ('search', 'red shoes')
    >>> parse_webshop_action("go north") is None
    True
    """
    m = _ACTION.match(action or "")
    if not m:
        return None
    verb, arg = m.group(1).lower(), " ".join(m.group(2).split())
    return (verb, arg if verb == "search" else arg.lower()) if arg else None


class WebShopEnv:
    """One shopper on the shared catalogue (one episode at a time)."""

    name = FAMILY

    def __init__(self, shop: WebShopCatalogue, max_steps: int = 15, search: str = "free"):
        if search not in SEARCH_MODES:
            raise ValueError(f"env.webshop_search={search!r}: choose free or choice")
        self.shop = shop
        self.max_steps = max_steps
        self.search = search
        self.goal_: Optional[dict] = None
        self.page = _Page()
        self.steps = 0
        self.done = False
        self.searched: list[str] = []

    # ---- protocol -------------------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        goal = self.shop.by_key.get(task.key)
        if goal is None:
            raise KeyError(f"WebShop goal {task.key!r} is not in this catalogue's goals")
        self.goal_, self.page, self.steps, self.done = goal, _Page(), 0, False
        self.searched: list[str] = []
        self._first = self._obs = self.render()
        self._transcript: list[tuple[str, str]] = []
        return self._first

    def goal(self) -> str:
        return self.goal_["instruction_text"] if self.goal_ else ""

    def admissible_actions(self) -> Optional[list[str]]:
        if self.done:
            return []
        if self.page.kind == "search":
            return [f"search[{q}]" for q in self.candidates()] if self.search == "choice" else None
        return [f"click[{c}]" for c in self.clickables()]

    def candidates(self) -> list[str]:
        """The search queries choice mode offers on this goal (a function of the instruction text only)."""
        return search_candidates(self.goal())

    def step(self, action: str) -> StepResult:
        res = self._step(action)
        self._obs = res.observation
        self._transcript.append((action, res.observation))
        return res

    def _step(self, action: str) -> StepResult:
        if self.goal_ is None or self.done:
            raise RuntimeError("step() before reset() or after the episode ended")
        self.steps += 1
        parsed = parse_webshop_action(action)
        if parsed is None or not self._apply(*parsed):
            info = {"valid": False}
            done = self.steps >= self.max_steps
            self.done = done
            return StepResult(f"{INVALID_ACTION_OBS}\n{self.render()}", 0.0, done, False, info)
        if parsed == ("click", BUY):
            return self._buy()
        self.done = self.steps >= self.max_steps
        return StepResult(self.render(), 0.0, self.done, False, {"valid": True})

    def expert_action(self) -> Optional[str]:
        """Search the instruction, open the goal product (paging on when it is further down), choose the goal's
        options, buy. When the goal product is not among the results it searches once more with the instruction's
        first clause and the product type; failing that, it buys the first result (best effort: a partial reward)."""
        if self.goal_ is None or self.done:
            return None
        p, g = self.page, self.goal_
        if p.kind == "search":
            tried = len(self.searched)
            queries = expert_queries(g, self.search)
            return f"search[{queries[min(tried, len(queries) - 1)]}]"
        if p.kind == "results":
            here = self._page_results()
            if g["asin"] in here:
                return f"click[{self._result_target(g['asin'])}]"
            if g["asin"] in p.results:
                return f"click[{NEXT if p.results.index(g['asin']) >= p.page * PER_PAGE else PREV}]"
            if len(self.searched) < len(expert_queries(g, self.search)):
                return f"click[{BACK}]"
            return f"click[{self._result_target(here[0])}]" if here else f"click[{BACK}]"
        if p.kind in SUBPAGES:
            return f"click[{PREV}]"
        if p.asin != g["asin"]:
            return f"click[{BUY}]"
        for name, value in sorted(g["goal_options"].items()):
            if p.options.get(name) != value:
                return f"click[{value}]"
        return f"click[{BUY}]"

    def strategy_action(self, name: str) -> Optional[str]:
        """The next command of the registered strategy expert ``name`` (``webshop.strategies``): it reads only the
        agent's view (instruction, pages shown, admissible commands, its own past actions)."""
        if self.goal_ is None or self.done:
            return None
        view = EpisodeView(self.goal(), self._first, self._obs, tuple(self.admissible_actions() or ()),
                           tuple(self._transcript))
        return get_strategy(FAMILY, name).act(view)

    def close(self) -> None:
        self.goal_ = None

    # ---- pages ----------------------------------------------------------------------------------
    def _page_results(self) -> list[str]:
        start = (self.page.page - 1) * PER_PAGE
        return self.page.results[start:start + PER_PAGE]

    def _result_target(self, asin: str) -> str:
        """How a result is clicked: its ASIN (free) or its rank and first title words (choice)."""
        if self.search == "choice":
            return result_label(self.page.results.index(asin) + 1, self.shop.products[asin].title)
        return asin.lower()

    def clickables(self) -> list[str]:
        p = self.page
        if p.kind == "results":
            out = [BACK]
            if p.page > 1:
                out.append(PREV)
            if p.page * PER_PAGE < len(p.results):
                out.append(NEXT)
            return out + [self._result_target(a) for a in self._page_results()]
        if p.kind == "item":
            values = [v for vals in self.shop.products[p.asin].options.values() for v in vals]
            return [BACK, PREV, *dict.fromkeys(values), *SUBPAGES, BUY]
        if p.kind in SUBPAGES:
            return [BACK, PREV]
        return []

    def render(self) -> str:
        """The page as WebShop's text mode shows it (visible text joined with ``[SEP]``)."""
        p, head = self.page, ["Instruction:", self.goal()]
        if p.kind == "search":
            return " [SEP] ".join(["WebShop", *head, "Search"])
        if p.kind == "results":
            parts = [*head, "Back to Search", f"Page {p.page} (Total results: {len(p.results)})"]
            parts += ["< Prev"] if p.page > 1 else []
            parts += ["Next >"] if p.page * PER_PAGE < len(p.results) else []
            start = (p.page - 1) * PER_PAGE
            for i, asin in enumerate(self._page_results(), start + 1):
                prod = self.shop.products[asin]
                parts += [asin if self.search == "free" else f"result {i}", prod.title, prod.price_tag]
            return " [SEP] ".join(parts)
        prod = self.shop.products[p.asin]
        parts = [*head, "Back to Search", "< Prev"]
        if p.kind == "item":
            for name, values in prod.options.items():
                chosen = p.options.get(name)
                parts += [name, *[f"{v} (selected)" if v == chosen else v for v in values]]
            parts += [prod.title, f"Price: ${self.shop.prices[p.asin]:.2f}", "Rating: N.A.", "Description", "Features",
                      "Reviews", "Buy Now"]
        elif p.kind == "description":
            parts.append(prod.description)
        elif p.kind == "features":
            parts += list(prod.bullets)
        else:
            parts.append("No reviews.")
        return " [SEP] ".join(parts)

    def _apply(self, verb: str, arg: str) -> bool:
        """Move to the page an action leads to; False when the action is not available here."""
        p = self.page
        if verb == "search":
            if p.kind != "search":
                return False
            if self.search == "choice":
                offered = {q.lower(): q for q in self.candidates()}
                if arg.lower() not in offered:
                    return False
                arg = offered[arg.lower()]
            self.searched.append(arg)
            self.page = _Page("results", query=arg, results=self.shop.index.search(arg, MAX_RESULTS))
            return True
        if arg not in self.clickables():
            return False
        if arg == BACK:
            self.page = _Page()
        elif p.kind == "results":
            if arg in (NEXT, PREV):
                p.page += 1 if arg == NEXT else -1
            else:
                asin = p.results[label_rank(arg) - 1] if self.search == "choice" else arg.upper()
                self.page = _Page("item", p.query, p.results, p.page, asin=asin)
        elif p.kind == "item":
            if arg == PREV:
                self.page = _Page("results", p.query, p.results, p.page)
            elif arg in SUBPAGES:
                p.kind = arg
            elif arg != BUY:
                for name, values in self.shop.products[p.asin].options.items():
                    if arg in values:
                        p.options[name] = arg
                        break
        elif arg == PREV:  # a sub-page
            p.kind = "item"
        return True

    def _buy(self) -> StepResult:
        p = self.page
        prod = self.shop.products[p.asin]
        r = purchase_reward(prod, self.goal_, self.shop.prices[p.asin], dict(p.options))
        self.done = True
        won = r["reward"] >= 1.0 - 1e-9
        obs = f"Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {r['reward']:.2f}"
        return StepResult(obs, float(r["reward"]), True, won, {"valid": True, "purchase": {"asin": p.asin, **r}})


class WebShopFamily(EnvFamily):
    """WebShop's synthetic goals of the small setting, split into ``test`` (500), ``dev`` (``env.webshop_n_dev``,
    default none) and ``train``."""

    name = FAMILY

    def __init__(self, cfg: EnvConfig, cache_dir: str | Path) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)

    @property
    def shop(self) -> WebShopCatalogue:
        return catalogue(self.cfg, self.cache_dir)

    def splits(self) -> list[str]:
        return ["train", "dev", "test"] if self.cfg.webshop_n_dev else ["train", "test"]

    def task_types(self) -> list[str]:
        return sorted({g["category"] for g in self.shop.goals})

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        if split == "eval":
            split = "test"
        if split not in self.splits():
            raise ValueError(f"WebShop split {split!r}: choose {' or '.join(self.splits())}"
                             + ("" if "dev" in self.splits() else " (a dev split needs env.webshop_n_dev > 0)"))
        if n < 0:
            raise ValueError(f"n={n}: use 0 for the whole split or a positive subset size")
        goals = self.shop.splits[split]
        if 0 < n < len(goals):
            goals = [goals[i] for i in sorted(random.Random(seed).sample(range(len(goals)), n))]
        return [Task(FAMILY, split, g["category"], goal_key(g), {"instruction": g["instruction_text"]}) for g in goals]

    def make(self) -> WebShopEnv:
        return WebShopEnv(self.shop, max_steps=self.cfg.max_steps, search=getattr(self.cfg, "webshop_search", "free"))


def play_expert(env: WebShopEnv, task: Task) -> dict[str, Any]:
    """Play the expert on ``task``; outcome, reward and where the goal product ranked."""
    t0 = time.perf_counter()
    env.reset(task)
    actions, r = [], None
    while not env.done:
        a = env.expert_action()
        actions.append(a)
        r = env.step(a)
    rank = None
    if env.page.results and env.goal_["asin"] in env.page.results:
        rank = env.page.results.index(env.goal_["asin"]) + 1
    return {"task": task.key, "won": bool(r and r.won), "reward": float(r.reward) if r else 0.0, "steps": len(actions),
            "rank": rank, "seconds": time.perf_counter() - t0, "actions": actions}
