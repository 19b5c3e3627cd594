"""WebShop's purchase reward (``web_agent_site/engine/goal.py`` ``get_reward``), rewritten.

    reward = (attribute matches + option matches + [price <= bound]) / (attributes + options + 1) × r_type

- an attribute matches when a product attribute has ``token_set_ratio > 85`` with it, or it occurs in the
  title, bullet points or description (lower-cased);
- an option matches when a chosen option value has ``token_set_ratio > 85`` with the goal's value, both
  first reduced to a colour name when they contain one (WebShop's ``normalize_color``);
- ``r_type``: 1.0, 0.5 when neither the search query, two levels of the category path, nor more than 20 % of
  the goal name's nouns match; 0.1 below 10 % noun overlap; 0.0 with no noun in common.

Fuzzy matching is rapidfuzz's ``token_set_ratio`` (same definition as thefuzz, which WebShop uses). WebShop
passes the goal's options as ``(name, value)`` pairs that thefuzz turns into their string form; we compare
values, which gives the same match whenever the chosen value's words are a subset of the goal value's.

Noun extraction: WebShop tags the product names with spaCy's ``en_core_web_sm``, which cannot be installed
here. The substitute keeps the name's alphabetic words of 3+ letters that are not English stop words, not
colour or size words and not one of a short list of common adjectives and units. It over-keeps some
adjectives a tagger would drop, which can only raise a wrong product's overlap; buying the goal product
scores 1.0 either way (its name is the goal's name: overlap 1, and the query matches).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from rapidfuzz import fuzz

from .data import Product

FUZZY_THRESHOLD = 85
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "brown",
    "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut", "chocolate", "christmas",
    "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant",
    "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime", "magenta", "maroon",
    "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard", "natural", "navy", "neutral",
    "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "rust",
    "sand", "sapphire", "silver", "sky", "slate", "smoke", "snow", "stone", "taupe", "teal", "tiger", "turquoise",
    "vanilla", "violet", "walnut", "wheat", "white", "wine", "yellow",
)
"WebShop's ``COLOR_SET`` (``web_agent_site/engine/normalize.py``), in the same spirit: the first listed colour found wins."
_NOT_NOUNS = frozenset(
    "a an and the for with of in on to by from at or as is are be this that these those its it you your our "
    "new set pack pcs piece pieces count size small medium large x xl xxl xs inch inches cm mm ft oz fl lb lbs "
    "ml pound ounce ounces free best high low premium natural organic soft hard easy long short extra super "
    "great compatible portable professional ultra mini lightweight heavy duty waterproof womens mens women men "
    "girls boys kids baby adult unisex".split()
) | frozenset(COLOR_SET)
_WORD = re.compile(r"[a-z]+")


def normalize_color(text: str) -> str:
    """The first WebShop colour contained in ``text``, else ``text``."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def name_nouns(name: str) -> list[str]:
    """The spaCy-free stand-in for WebShop's noun extraction of a product name (see the module docstring)."""
    return [w for w in _WORD.findall(name.lower()) if len(w) >= 3 and w not in _NOT_NOUNS]


def type_reward(product: Product, goal: dict) -> dict:
    """``r_type`` and its parts: query match, category overlap (>= 2 levels), title-noun overlap."""
    query_match = product.query == goal["query"]
    bought_cat = {x.strip() for x in product.product_category.split("›")}
    goal_cat = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_cat & goal_cat) >= 2
    desired = name_nouns(goal["name"])
    bought = name_nouns(product.name)
    title_score = 0.2 if not desired else len(set(bought) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(product: Product, attributes: Iterable[str]) -> int:
    """Goal attributes the product has (fuzzy against its attributes, else a substring of its text)."""
    title, bullets, desc = product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()
    n = 0
    for g in attributes:
        if any(fuzz.token_set_ratio(p, g) > FUZZY_THRESHOLD for p in product.attributes):
            n += 1
        elif g in title or g in bullets or g in desc:
            n += 1
    return n


def option_matches(chosen: Iterable[str], goal_options: Iterable[str]) -> int:
    """Goal option values matched by a chosen value (colour-normalised, fuzzy)."""
    chosen = [normalize_color(c) for c in chosen]
    n = 0
    for g in (normalize_color(v) for v in goal_options):
        if any(fuzz.token_set_ratio(c, g) > FUZZY_THRESHOLD for c in chosen):
            n += 1
    return n


def purchase_reward(product: Product, goal: dict, price: float, options: dict[str, str]) -> dict:
    """WebShop's reward of buying ``product`` with ``options`` at ``price`` for ``goal``, with its parts."""
    r_type = type_reward(product, goal)
    n_att = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(options.values(), goal["goal_options"].values())
    r_price: Optional[bool] = price <= goal["price_upper"] if goal["price_upper"] > 0 else None
    denom = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    reward = (n_att + n_opt + bool(r_price)) / denom * r_type["r_type"]
    return {"reward": reward, "r_att": n_att / max(len(goal["attributes"]), 1), "n_attr_matches": n_att,
            "n_option_matches": n_opt, "r_price": r_price, **r_type}
