"""WebShop's published reward for a purchase (Yao et al., 2022, "WebShop", section 3.1).

    reward = r_type * (attributes matched + options matched + [price <= price_upper])
                    / (goal attributes + goal options + 1)

- an attribute of the goal matches when one of the product's attributes is a fuzzy match
  (token-set ratio over 85), or else when it appears in the product's title, features or
  description;
- an option of the goal matches when a chosen option is a fuzzy match after colour
  normalization (a colour name inside an option stands for the option);
- ``r_type`` (the product type): 1 when the query or two product categories match or more
  than 20 % of the goal name's nouns are in the product's name, 0.5 when none of these hold,
  0.1 below 10 % of the nouns and 0 with none.

Deviation: WebShop finds nouns with spaCy's ``en_core_web_sm`` model. Where that model is
installed it is used here too; elsewhere (it is not on the package registries) every word of the
name that is not a stop word or a number counts as a noun, which scores a name's adjectives as
nouns. Fuzzy matching uses ``rapidfuzz`` with thefuzz's processing (lowercase, alphanumerics,
rounded score), which WebShop's ``thefuzz`` wraps.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

FUZZY_MATCH = 85  # a token-set ratio above this is a match

COLOR_SET = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]
"""WebShop's colour vocabulary, in its order (the first colour found inside an option wins)."""

_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "without",
        "x",
        "pack",
        "count",
        "oz",
        "ounce",
        "inch",
        "inches",
        "size",
        "set",
        "pcs",
        "piece",
        "pieces",
    ]
)


def normalize_color(option: str) -> str:
    """The first colour of :data:`COLOR_SET` inside ``option``, else ``option``."""
    return next((color for color in COLOR_SET if color in option), option)


def fuzzy_match(a: str, b: str) -> bool:
    """thefuzz's ``token_set_ratio(a, b) > 85`` (lowercased alphanumerics, rounded score)."""
    from rapidfuzz import fuzz, utils

    return round(fuzz.token_set_ratio(a, b, processor=utils.default_process)) > FUZZY_MATCH


@functools.cache
def _spacy_model() -> Any:
    try:
        import spacy

        return spacy.load("en_core_web_sm")
    except Exception:  # no spaCy, or no model: the word-based stand-in
        return None


def nouns(text: str) -> list[str]:
    """The nouns of a product name, lowercased (see the module docstring for the stand-in)."""
    model = _spacy_model()
    if model is not None:
        return [t.text.lower() for t in model(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]
    words = re.findall(r"[a-z][a-z'-]*", text.lower())
    return [w for w in words if w not in _STOP_WORDS]


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    """``r_type`` and its parts: query match, category match, title score."""
    query_match = product["query"] == goal["query"]
    bought_categories = {c.strip() for c in product["product_category"].split("›")}
    goal_categories = {c.strip() for c in goal["product_category"].split("›")}
    category_match = len(bought_categories & goal_categories) >= 2
    wanted = nouns(goal["name"])
    have = set(nouns(product["name"]))
    title_score = len(set(wanted) & have) / len(wanted) if wanted else 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {
        "r_type": r_type,
        "query_match": query_match,
        "category_match": category_match,
        "title_score": title_score,
    }


def attribute_matches(product: Mapping[str, Any], goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (fuzzy attribute match, else in its text)."""
    texts = [
        product["Title"].lower(),
        " ".join(product["BulletPoints"]).lower(),
        product["Description"].lower(),
    ]
    matches = 0
    for wanted in goal_attributes:
        if any(fuzzy_match(have, wanted) for have in product["Attributes"]) or any(
            wanted in t for t in texts
        ):
            matches += 1
    return matches


def option_matches(chosen: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal options are among the chosen ones (fuzzy, after colour normalization)."""
    chosen = [normalize_color(o) for o in chosen]
    return sum(any(fuzzy_match(c, normalize_color(g)) for c in chosen) for g in goal_options)


def purchase_reward(
    product: Mapping[str, Any], goal: Mapping[str, Any], price: float, options: Mapping[str, str]
) -> tuple[float, dict[str, Any]]:
    """WebShop's reward for buying ``product`` at ``price`` with ``options`` chosen.

    Args:
        product: the bought product (``name``, ``query``, ``product_category``, ``Title``,
            ``BulletPoints``, ``Description``, ``Attributes``).
        goal: ``name``, ``query``, ``product_category``, ``attributes``, ``goal_options`` (a
            list of option values) and ``price_upper``.
        price: the product's price.
        options: the options chosen on the item page, ``{option name: value}``.

    Returns:
        The reward in [0, 1] and its parts.
    """
    type_parts = type_reward(product, goal)
    goal_options = list(
        goal["goal_options"].values()
        if isinstance(goal["goal_options"], Mapping)
        else goal["goal_options"]
    )
    n_attr = attribute_matches(product, goal["attributes"])
    n_option = option_matches(options.values(), goal_options)
    r_price = price <= goal["price_upper"] if goal["price_upper"] > 0 else False
    total = (n_attr + n_option + int(r_price)) / (len(goal["attributes"]) + len(goal_options) + 1)
    reward = total * type_parts["r_type"]
    return reward, {
        **type_parts,
        "attributes_matched": n_attr,
        "options_matched": n_option,
        "price_ok": bool(r_price),
    }
