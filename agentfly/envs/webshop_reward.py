"""WebShop's published reward for a purchase (Yao et al., 2022, "WebShop", section 3.1), as
WebShop's ``web_agent_site/engine/goal.py`` computes it:

    reward = r_type * (attributes matched + options matched + [price <= price_upper])
                    / (goal attributes + goal options + 1)

- an attribute of the goal matches when one of the product's attributes is a fuzzy match
  (thefuzz's token-set ratio over 85), or else when it appears in the product's title, features
  or description;
- an option of the goal matches when a chosen option is a fuzzy match after colour
  normalization (a colour name inside an option stands for the option). Goal options given as a
  dict (WebShop's synthetic goals) are matched as WebShop passes them, as ``(name, value)`` pairs:
  a pair reads as the text ``"('size', 'large')"``, and stands for a colour only when its name or
  value is one;
- ``r_type`` (the product type): 1 when the query or two product categories match or more
  than 20 % of the goal name's nouns are in the product's name, 0.5 when none of these hold,
  0.1 below 10 % of the nouns and 0 with none.

A goal without attributes, or with a ``price_upper`` not above 0, is refused with a ValueError
(WebShop's own code fails on both, dividing by zero or adding None; neither of its goal makers
writes one).

Deviations: WebShop finds nouns with spaCy's English model (``en_core_web_sm``; its tests were
written with ``en_core_web_lg``). Where ``en_core_web_sm`` is installed it is used here too;
elsewhere (no registry serves it under its name) :func:`title_nouns` stands in. The model tags
nearly every word of a title-cased product name a proper noun, and the stand-in takes every word
but numbers, codes with digits and function words: it gives WebShop's tests' title scores, and the
model's nouns on every name of the generated catalog but five (``Lumen Lead Free Coffee Mug``,
``Lumen Sulfate Free Shampoo``, ``Dalia Quick Drying T-Shirt``, ``Everly Insulated Coffee Mug``,
``Everly Lead Free Coffee Mug``, where ``en_core_web_sm`` 3.8 tags a word a verb or an adverb).
Fuzzy matching is thefuzz's (``rapidfuzz`` under it): characters 128-255 dropped (its
``force_ascii``), then lowercased alphanumerics, the score rounded.
"""

from __future__ import annotations

import functools
import importlib.util
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

# fmt: off
_FUNCTION_WORDS = frozenset({
    "a", "an", "the", "and", "or", "nor", "but", "for", "with", "without", "of", "in", "on", "at",
    "by", "to", "from", "into", "onto", "over", "per", "via", "vs", "x",
})
# fmt: on
"""Words the model tags as determiners, conjunctions, prepositions or symbols even in a
title-cased name. ``off`` is not one: WebShop's test title ``... Casual - Off White`` scores as if
it were a noun."""

_LATIN_1 = dict.fromkeys(range(128, 256))  # thefuzz's force_ascii drops these characters
_CLITIC = re.compile(r"(?<=\w)['’]s\b")  # the possessive 's, which spaCy splits off ("Men's")
_WORD = re.compile(r"[^\W_]+")  # a run of letters and digits


def normalize_color(option: Any) -> Any:
    """The first colour of :data:`COLOR_SET` in ``option``, else ``option`` (inside a text; equal
    to an element of a ``(name, value)`` pair)."""
    return next((color for color in COLOR_SET if color in option), option)


def _fuzz_text(text: Any) -> str:
    from rapidfuzz import utils

    return utils.default_process(str(text).translate(_LATIN_1))


def fuzzy_match(a: Any, b: Any) -> bool:
    """thefuzz's ``token_set_ratio(a, b) > 85``: each side as text, characters 128-255 dropped,
    lowercased alphanumerics, the score rounded."""
    from rapidfuzz import fuzz

    return round(fuzz.token_set_ratio(_fuzz_text(a), _fuzz_text(b))) > FUZZY_MATCH


@functools.cache
def _spacy_model() -> Any:
    """spaCy's ``en_core_web_sm`` where that package is installed, else None."""
    if importlib.util.find_spec("en_core_web_sm") is None:
        return None
    import spacy

    return spacy.load("en_core_web_sm")


def title_nouns(text: str) -> list[str]:
    """The stand-in for the model's nouns of a product name: its words (runs of letters and
    digits, the possessive 's dropped), lowercased, but function words and those with a digit
    (numbers and codes such as ``4K``, which WebShop's test title scores leave out)."""
    words = _WORD.findall(_CLITIC.sub(" ", text.lower()))
    return [w for w in words if w not in _FUNCTION_WORDS and not any(c.isdigit() for c in w)]


def nouns(text: str) -> list[str]:
    """The nouns of a product name, lowercased: spaCy's ``en_core_web_sm`` where installed, else
    :func:`title_nouns`."""
    model = _spacy_model()
    if model is None:
        return title_nouns(text)
    return [t.text.lower() for t in model(text) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


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


def option_matches(chosen: Iterable[str], goal_options: Iterable[Any]) -> int:
    """How many goal options (texts, or ``(name, value)`` pairs) are among the chosen ones
    (fuzzy, after colour normalization)."""
    chosen = [normalize_color(o) for o in chosen]
    return sum(any(fuzzy_match(c, normalize_color(g)) for c in chosen) for g in goal_options)


def goal_problem(goal: Mapping[str, Any]) -> str | None:
    """Why WebShop's reward cannot score ``goal`` (no attributes, or no price ceiling above 0),
    else None."""
    if not goal.get("attributes"):
        return (
            "a WebShop goal needs at least one attribute (WebShop's reward divides by their count)"
        )
    if not goal.get("price_upper", 0) > 0:
        return f"a WebShop goal needs a price_upper above 0, got {goal.get('price_upper')!r}"
    return None


def purchase_reward(
    product: Mapping[str, Any], goal: Mapping[str, Any], price: float, options: Mapping[str, str]
) -> tuple[float, dict[str, Any]]:
    """WebShop's reward for buying ``product`` at ``price`` with ``options`` chosen.

    Args:
        product: the bought product (``name``, ``query``, ``product_category``, ``Title``,
            ``BulletPoints``, ``Description``, ``Attributes``).
        goal: ``name``, ``query``, ``product_category``, ``attributes``, ``goal_options`` (a
            list of option values, or WebShop's synthetic ``{option name: value}``) and
            ``price_upper``.
        price: the product's price.
        options: the options chosen on the item page, ``{option name: value}``.

    Returns:
        The reward in [0, 1] and its parts.

    Raises:
        ValueError: a goal WebShop cannot score (:func:`goal_problem`).
    """
    problem = goal_problem(goal)
    if problem is not None:
        raise ValueError(problem)
    type_parts = type_reward(product, goal)
    goal_options = goal["goal_options"]
    wanted = list(goal_options.items() if isinstance(goal_options, Mapping) else goal_options)
    n_attr = attribute_matches(product, goal["attributes"])
    n_option = option_matches(options.values(), wanted)
    price_ok = price <= goal["price_upper"]
    total = (n_attr + n_option + int(price_ok)) / (len(goal["attributes"]) + len(wanted) + 1)
    reward = total * type_parts["r_type"]
    return reward, {
        **type_parts,
        "attributes_matched": n_attr,
        "options_matched": n_option,
        "price_ok": price_ok,
    }
