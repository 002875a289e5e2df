"""WebShop's reward against a re-derivation of WebShop's own ``get_reward``
(princeton-nlp/WebShop, ``web_agent_site/engine/goal.py`` and ``normalize.py``, with thefuzz 0.20
or later, as AgentFly's WebShop image installs it), written below from these facts of its code:

- thefuzz's ``token_set_ratio(a, b)`` (defaults ``force_ascii=True``, ``full_process=True``)
  turns each side into text with ``str()`` (a ``(name, value)`` pair reads ``"('size',
  'large')"``), deletes the characters 128-255, lowercases, makes every character that is not a
  letter or a digit a space and trims. The score, 0 when a side has no token, is the best of
  ``ratio(sect, sect + rest_a)``, ``ratio(sect, sect + rest_b)`` and ``ratio(sect + rest_a, sect +
  rest_b)`` over the sorted, space-joined tokens (those both sides have, and each side's rest),
  with ``ratio(x, y) = 100 * 2 * LCS(x, y) / (len(x) + len(y))`` (0 with an empty side), rounded.
  A match scores above 85.
- ``normalize_color(o)``: the first colour of WebShop's list with ``colour in o`` (a substring of
  a text; an element of a pair), else ``o``.
- ``get_type_reward``: the queries equal; two categories or more shared (split at ``›``,
  stripped); the title score, shared distinct nouns over the goal name's noun count (repeats
  counted), 0.2 without nouns. ``r_type`` is 1 when any of the three holds (the title score above
  0.2), else 0.5; 0.1 below a title score of 0.1; 0 at 0. The nouns are spaCy's ``NOUN`` and
  ``PROPN`` tokens, lowercased: :data:`MODEL_NOUNS` records what ``en_core_web_sm`` 3.8.0 gives.
- ``get_attribute_reward``: a goal attribute counts when a product attribute matches it, else when
  it, as written, is inside the lowercased title, the features joined by spaces, or the lowercased
  description; the count is divided by the goal's attribute count (none: ZeroDivisionError).
- ``get_option_reward(chosen values, goal options)``: both sides colour-normalized; a goal option
  counts when a chosen value matches it.
- ``get_reward``: dict goal options are passed as ``.items()``; the price part is
  ``price <= price_upper`` when ``price_upper > 0``, else None, which the sum cannot add
  (TypeError); ``r_type * (attributes + options + price part) / (attributes + goal options + 1)``.
"""

from __future__ import annotations

import pytest

from agentfly.envs.webshop_catalog import synthetic_catalog
from agentfly.envs.webshop_reward import COLOR_SET, purchase_reward, title_nouns

pytest.importorskip("rapidfuzz", reason="needs rapidfuzz (pip install 'agentfly[envs]')")


class WebShopRaises(Exception):
    """A goal on which WebShop's own code raises."""


def fuzz_text(value):
    kept = "".join(c for c in str(value) if not 128 <= ord(c) <= 255)
    return "".join(c if c.isalnum() else " " for c in kept.lower()).strip()


def lcs(x, y):
    previous = [0] * (len(y) + 1)
    for a in x:
        current = [0] * (len(y) + 1)
        for j, b in enumerate(y, start=1):
            current[j] = previous[j - 1] + 1 if a == b else max(previous[j], current[j - 1])
        previous = current
    return previous[-1]


def ratio(x, y):
    return 0.0 if not x or not y else 200 * lcs(x, y) / (len(x) + len(y))


def token_set_score(a, b):
    left, right = set(fuzz_text(a).split()), set(fuzz_text(b).split())
    if not left or not right:
        return 0
    both = " ".join(sorted(left & right))
    with_a = f"{both} {' '.join(sorted(left - right))}".strip()
    with_b = f"{both} {' '.join(sorted(right - left))}".strip()
    return round(max(ratio(both, with_a), ratio(both, with_b), ratio(with_a, with_b)))


def colour_of(option):
    return next((colour for colour in COLOR_SET if colour in option), option)


def webshop_reward(product, goal, price, chosen):
    """WebShop's ``get_reward`` (see the module docstring), with :func:`model_nouns`."""
    goal_nouns, product_nouns = model_nouns(goal["name"]), set(model_nouns(product["name"]))
    title = len(set(goal_nouns) & product_nouns) / len(goal_nouns) if goal_nouns else 0.2
    shared = {c.strip() for c in goal["product_category"].split("›")} & {
        c.strip() for c in product["product_category"].split("›")
    }
    r_type = 1.0 if product["query"] == goal["query"] or len(shared) >= 2 or title > 0.2 else 0.5
    r_type = 0.0 if title == 0 else 0.1 if title < 0.1 else r_type
    if not goal["attributes"]:
        raise WebShopRaises("ZeroDivisionError")
    texts = [
        product["Title"].lower(),
        " ".join(product["BulletPoints"]).lower(),
        product["Description"].lower(),
    ]
    attributes = sum(
        any(token_set_score(have, wanted) > 85 for have in product["Attributes"])
        or any(wanted in text for text in texts)
        for wanted in goal["attributes"]
    )
    wanted_options = goal["goal_options"]
    if isinstance(wanted_options, dict):
        wanted_options = wanted_options.items()
    values = [colour_of(v) for v in chosen.values()]
    options = sum(
        any(token_set_score(v, colour_of(w)) > 85 for v in values) for w in wanted_options
    )
    if not goal["price_upper"] > 0:
        raise WebShopRaises("TypeError")
    count = len(goal["attributes"]) + len(goal["goal_options"]) + 1
    return r_type * (attributes + options + (price <= goal["price_upper"])) / count


# ------------------------------------------------------------------ spaCy's nouns, recorded

# fmt: off
MODEL_NOUNS = {  # en_core_web_sm 3.8.0 on the names of the designed cases
    "Kitchen Knife Set": ["kitchen", "knife", "set"],
    "Coffee Mug Set": ["coffee", "mug", "set"],
    "Men Winter Jacket": ["men", "winter", "jacket"],
    "Men's Shirt": ["men", "shirt"],
    "Cotton T-Shirt": ["cotton", "t", "shirt"],
    "Tea Tree Shampoo": ["tea", "tree", "shampoo"],
    "Acme Short Sleeve T-Shirt": ["acme", "short", "sleeve", "t", "shirt"],
    "Acme Lightweight Yoga Mat": ["acme", "lightweight", "yoga", "mat"],
    "Acme Pro Steel Chef Knife Block Set With Sharpener Board Stand Rack": [
        "acme", "pro", "steel", "chef", "knife", "block", "set", "sharpener", "board", "stand", "rack",
    ],
    "Wool Winter Coat": ["wool", "winter", "coat"],
    "Espresso Cup": ["espresso", "cup"],
    "100": [],
}
# fmt: on
CATALOG_EXCEPTIONS = {  # the generated names where en_core_web_sm tags a word a verb or adverb
    "Lumen Lead Free Coffee Mug": ["lumen", "free", "coffee", "mug"],
    "Lumen Sulfate Free Shampoo": ["lumen", "free", "shampoo"],
    "Dalia Quick Drying T-Shirt": ["dalia", "quick", "t", "shirt"],
    "Everly Insulated Coffee Mug": ["insulated", "coffee", "mug"],
    "Everly Lead Free Coffee Mug": ["lead", "free", "coffee", "mug"],
}


def model_nouns(name):
    """en_core_web_sm's nouns: recorded above; on any other generated catalog name, every word
    (it splits ``T-Shirt`` into ``t`` and ``shirt``)."""
    for table in (MODEL_NOUNS, CATALOG_EXCEPTIONS):
        if name in table:
            return table[name]
    return name.lower().replace("-", " ").split()


# ------------------------------------------------------------------ designed cases

KNIVES = "Home & Kitchen › Kitchen & Dining › Cutlery › Knife Sets"
MUGS = "Kitchen Supplies › Drinkware › Mugs"  # no category shared with KNIVES
JACKETS = "Clothing › Men › Coats & Jackets"
SHIRTS = "Apparel › Men › Shirts"  # one shared with JACKETS


def product(name, query="q", category=KNIVES, attributes=(), title=None, bullets=(), text=""):
    return {"name": name, "query": query, "product_category": category, "Title": title or name,
            "BulletPoints": list(bullets), "Description": text, "Attributes": list(attributes)}  # fmt: skip


def goal(name, attributes, options, query="q", category=KNIVES, price_upper=100.0):
    return {"name": name, "query": query, "product_category": category,
            "attributes": list(attributes), "goal_options": options, "price_upper": price_upper}  # fmt: skip


SHIRT = product("Cotton T-Shirt", attributes=["cotton", "short sleeve"])
SHAMPOO = product("Tea Tree Shampoo", bullets=["Rubber", "sole grip"], text="Made with Argan oil.")
KNIFE = product("Kitchen Knife Set", attributes=["dishwasher safe"])
MAT = product("Acme Lightweight Yoga Mat", "yoga mats", "Sports › Yoga › Mats", ["dishwasher safe"])


def shirt_goal(options):
    return goal("Cotton T-Shirt", ["cotton", "short sleeve"], options)


def on_shampoo(wanted, have=()):
    return SHAMPOO | {"Attributes": list(have)}, goal("Tea Tree Shampoo", [wanted], [])


# name: (product, goal, price, chosen options, WebShop's reward derived by hand)
# fmt: off
CASES = {
    "'set' is a noun": (
        product("Coffee Mug Set", "mugs", MUGS, ["dishwasher safe"]),
        goal("Kitchen Knife Set", ["dishwasher safe"], [], "knives"), 20.0, {}, 1.0),
    "men's is men": (
        product("Men's Shirt", "shirts", SHIRTS, ["machine wash"]),
        goal("Men Winter Jacket", ["machine wash"], [], "jackets", JACKETS), 20.0, {}, 1.0),
    "dict options are pairs: x-large misses large": (
        SHIRT, shirt_goal({"size": "large"}), 10.0, {"size": "x-large"}, 0.75),
    "dict options are pairs: large": (SHIRT, shirt_goal({"size": "large"}), 10.0, {"size": "large"}, 1.0),
    "a pair with a colour value is that colour": (
        SHIRT, shirt_goal({"color": "black", "size": "large"}), 10.0,
        {"color": "black", "size": "large"}, 1.0),
    "a pair's words match the chosen colour": (
        SHIRT, shirt_goal({"color": "navy blue"}), 10.0, {"color": "navy blue"}, 1.0),
    "a pair misses another colour": (
        SHIRT, shirt_goal({"color": "navy blue"}), 10.0, {"color": "red"}, 0.75),
    "listed options: x-large holds large": (SHIRT, shirt_goal(["large"]), 10.0, {"size": "x-large"}, 1.0),
    "no options chosen": (SHIRT, shirt_goal(["large", "black"]), 10.0, {}, 0.6),
    "café is cafe": (
        SHIRT | {"Attributes": ["cafe"]}, goal("Cotton T-Shirt", ["café"], ["large", "black"]),
        10.0, {"size": "large", "color": "black"}, 1.0),
    "crème brûlée is creme brulee": (
        SHIRT | {"Attributes": ["creme brulee"]}, goal("Cotton T-Shirt", ["crème brûlée"], []),
        10.0, {}, 1.0),
    "characters past 255 stay": (
        SHIRT | {"Attributes": ["lodz style"]}, goal("Cotton T-Shirt", ["łódź style"], []),
        10.0, {}, 0.5),
    "a price over the ceiling": (KNIFE, goal("Kitchen Knife Set", ["dishwasher safe"], []), 120.0, {}, 0.5),
    "a price at the ceiling": (KNIFE, goal("Kitchen Knife Set", ["dishwasher safe"], []), 100.0, {}, 1.0),
    "an attribute in the title": (*on_shampoo("tree"), 10.0, {}, 1.0),
    "an attribute across two features": (*on_shampoo("rubber sole"), 10.0, {}, 1.0),
    "an attribute in the description": (*on_shampoo("argan oil"), 10.0, {}, 1.0),
    "a capitalised attribute is not found in the text": (*on_shampoo("Argan"), 10.0, {}, 0.5),
    "a fuzzy attribute": (*on_shampoo("essential oils", ["essential oil"]), 10.0, {}, 1.0),
    "an attribute missed": (*on_shampoo("earl grey", ["tea bag"]), 10.0, {}, 0.5),
    "a fuzzy option": (SHIRT, shirt_goal(["cool powder snow"]), 10.0, {"color": "powder snow"}, 1.0),
    "colours normalized": (SHIRT, shirt_goal(["grey heather"]), 10.0, {"color": "heather grey"}, 1.0),
    "pack of 2 holds pack of 12": (SHIRT, shirt_goal(["pack of 12"]), 10.0, {"size": "pack of 2"}, 1.0),
    "title score 0.2 without query or category: 0.5": (
        MAT, goal("Acme Short Sleeve T-Shirt", ["dishwasher safe"], [], "t-shirts", SHIRTS), 10.0, {}, 0.5),
    "title score 0.2 with the query: 1": (
        MAT, goal("Acme Short Sleeve T-Shirt", ["dishwasher safe"], [], "yoga mats", SHIRTS), 10.0, {}, 1.0),
    "title score 0.2 with two categories: 1": (
        MAT, goal("Acme Short Sleeve T-Shirt", ["dishwasher safe"], [], "t", "Sports › Yoga"), 10.0, {}, 1.0),
    "title score under 0.1: 0.1": (
        MAT, goal("Acme Pro Steel Chef Knife Block Set With Sharpener Board Stand Rack",
                  ["dishwasher safe"], [], "yoga mats"), 10.0, {}, 0.1),
    "no shared noun: 0": (
        product("Espresso Cup", "cups", MUGS, ["wool"]),
        goal("Wool Winter Coat", ["wool"], [], "cups", MUGS), 10.0, {}, 0.0),
    "a goal name without nouns: 0.5": (
        product("Espresso Cup", "cups", MUGS, ["wool"]), goal("100", ["wool"], []), 10.0, {}, 0.5),
}
REFUSED = {  # goals WebShop's code raises on; agentfly refuses them with a ValueError
    "price_upper 0": (KNIFE, goal("Kitchen Knife Set", ["dishwasher safe"], [], price_upper=0), 10.0, {}),
    "price_upper below 0": (KNIFE, goal("Kitchen Knife Set", ["dishwasher safe"], [], price_upper=-5), 1.0, {}),
    "no attributes": (KNIFE, goal("Kitchen Knife Set", [], ["large"]), 10.0, {"size": "large"}),
}
# fmt: on


@pytest.mark.parametrize("case", CASES)
def test_the_reward_is_webshops_on_designed_cases(case):
    bought, wanted, price, chosen, by_hand = CASES[case]
    expected = webshop_reward(bought, wanted, price, chosen)
    assert expected == pytest.approx(by_hand)
    assert purchase_reward(bought, wanted, price, chosen)[0] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("case", REFUSED)
def test_goals_webshop_cannot_score_are_refused(case):
    bought, wanted, price, chosen = REFUSED[case]
    with pytest.raises(WebShopRaises):
        webshop_reward(bought, wanted, price, chosen)
    with pytest.raises(ValueError, match="a WebShop goal needs"):
        purchase_reward(bought, wanted, price, chosen)


def test_the_reward_is_webshops_on_every_goal_and_product_of_the_generated_catalog():
    catalog = synthetic_catalog(num_products=30, num_goals=40, seed=0)
    rewards = []
    for wanted in catalog.goals:
        for bought in catalog.products:
            # the goal's value where the product has it, else its first: hits and misses
            chosen = {name: next((v for v in values if v in wanted["goal_options"]), values[0])
                      for name, values in bought["options"].items()}  # fmt: skip
            price = catalog.prices[bought["asin"]]
            expected = webshop_reward(bought, wanted, price, chosen)
            assert purchase_reward(bought, wanted, price, chosen)[0] == pytest.approx(
                expected, abs=1e-12
            ), (wanted["name"], bought["name"], chosen)
            rewards.append(round(expected, 6))
    assert len(rewards) == 1200
    assert {0.0, 1.0} < set(rewards) and len(set(rewards)) >= 6  # the sweep spans the bands


def test_the_noun_stand_in_gives_the_models_nouns_on_the_generated_names():
    names = {p["name"] for p in synthetic_catalog(num_products=3000, num_goals=0, seed=0).products}
    assert len(names) == 300  # every brand x attribute x product type
    differ = {name for name in names if title_nouns(name) != model_nouns(name)}
    assert differ == set(CATALOG_EXCEPTIONS)
    assert all(title_nouns(name) == nouns for name, nouns in MODEL_NOUNS.items())


def title_score(goal_name, product_name):
    wanted = title_nouns(goal_name)
    return len(set(wanted) & set(title_nouns(product_name))) / len(wanted)


def test_the_noun_stand_in_gives_webshops_test_title_scores():
    # WebShop's tests/web-agent-site/engine/test_goal.py, test_get_type_reward
    assert title_score("Name 1", "Name 1") == 1
    sneakers = "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White"
    peak = (
        "PEAK High Top Mens Basketball Shoes Lou Williams Streetball Master Breathable Non Slip "
        "Outdoor Sneakers"
    )
    assert title_score(sneakers, peak) == pytest.approx(0.333, abs=1e-2)
    cord = (
        "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
    )
    brst = (
        "BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo "
        "Home Theater System"
    )
    assert title_score(f"{cord} Home Theater System Subwoofer", brst) == pytest.approx(
        0.3, abs=1e-2
    )
    assert title_score(cord, brst) == pytest.approx(0.15, abs=1e-2)
    knob = "Rusticware 921ORB Kitchen and Bath Cabinet Knob"
    tweezers = (
        "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup "
        "Tweezers (Silver)"
    )
    assert title_score(knob, tweezers) < 0.05
