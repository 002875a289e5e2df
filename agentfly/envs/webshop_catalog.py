"""WebShop's products and goals: loaded from WebShop's own data files, or generated.

WebShop's data (Yao et al., 2022; the files its ``setup.sh`` downloads, from the links in the
README of github.com/princeton-nlp/WebShop) in one folder:

- ``items_shuffle_1000.json`` (or ``items_shuffle.json``, the full 1.18 M products): the
  products (``asin``, ``name``, ``category``, ``query``, ``product_category``,
  ``full_description``, ``small_description``, ``pricing``, ``customization_options``);
- ``items_ins_v2_1000.json`` (or ``items_ins_v2.json``): each product's ``attributes``;
- ``items_human_ins.json``: the human-written goals (``instruction``,
  ``instruction_attributes``, ``instruction_options``) of 12,087 instructions.

:func:`load_catalog` processes them as WebShop's engine does (prices from the price range, option
values lowercased with ``/`` as ``|``, goals without attributes skipped, a price ceiling drawn
from the next four price points above the product's price, goals shuffled with seed 233 so that
goal ``i`` is WebShop's goal ``i``: 0-499 test, 500-1499 dev, the rest train; AgentFly's WebShop
server keeps the file's order instead, ``shuffle_goals=False``). The random draws are seeded
(WebShop's are not).

:func:`synthetic_catalog` makes a small catalog with goals for tests and demos, the same for the
same seed. :class:`Catalog` holds either with a BM25 search (``bm25s``) over each product's
title, description, first feature and option values, 50 results at most as WebShop returns.
"""

from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentfly.envs.base import EnvUnavailable

SEARCH_RETURN_N = 50
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
GOAL_SHUFFLE_SEED = 233
FILES = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "full": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_GOALS_FILE = "items_human_ins.json"


@dataclass
class Catalog:
    """Products (WebShop's processed form), their prices, and the goals (tasks)."""

    products: list[dict[str, Any]]
    prices: dict[str, float]
    goals: list[dict[str, Any]]
    by_asin: dict[str, dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}

    @functools.cached_property
    def _index(self) -> Any:
        import bm25s

        documents = [_document(p) for p in self.products]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(documents, stopwords="en", show_progress=False), show_progress=False)
        return retriever

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The asins of the (at most ``k``) products best matching ``query``, best first."""
        import bm25s

        words = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not words[0] or not self.products:
            return []
        ids, scores = self._index.retrieve(words, k=min(k, len(self.products)), show_progress=False)
        return [self.products[int(i)]["asin"] for i, s in zip(ids[0], scores[0], strict=True) if float(s) > 0]

    def rows(self) -> list[dict[str, Any]]:
        """One task row per goal: the instruction as the ``question``, its index as ``task_id``."""
        return [{"question": g["instruction_text"], "task_id": i} for i, g in enumerate(self.goals)]


def _document(product: dict[str, Any]) -> str:
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], bullet, options]).lower()


# ---------------------------------------------------------------------- WebShop's own files


def _price_tag(pricing: str | None) -> tuple[list[float], str]:
    if not pricing:
        return [100.0], "$100.0"
    prices = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in pricing.split("$")[1:]]
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def _process_product(raw: dict[str, Any], attributes: dict[str, Any]) -> dict[str, Any]:
    asin = raw["asin"]
    pricing, price_tag = _price_tag(raw.get("pricing"))
    options: dict[str, list[str]] = {}
    for name, contents in (raw.get("customization_options") or {}).items():
        if contents:
            options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    small = raw.get("small_description") or []
    return {
        "asin": asin, "name": raw["name"], "Title": raw["name"], "category": raw["category"],
        "query": raw["query"].lower().strip(), "product_category": raw["product_category"],
        "Description": raw.get("full_description") or "",
        "BulletPoints": small if isinstance(small, list) else [small],
        "pricing": pricing, "Price": price_tag, "Rating": "N.A.", "Reviews": [],
        "options": options, "Attributes": attributes.get(asin, {}).get("attributes", ["DUMMY_ATTR"]),
    }


def _price_upper(price: float, rng: random.Random) -> tuple[float, str]:
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return 1000000.0, ""
    _, upper = sorted(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _product_price(pricing: list[float], rng: random.Random) -> float:
    return pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])


def _human_goals(products: list[dict[str, Any]], prices: dict[str, float], human: dict[str, Any],
                 rng: random.Random) -> list[dict[str, Any]]:
    goals = []
    for product in products:
        for ins in human.get(product["asin"], []):
            if not ins["instruction_attributes"]:
                continue
            upper, price_text = _price_upper(prices[product["asin"]], rng)
            goals.append({
                "asin": product["asin"], "category": product["category"], "query": product["query"],
                "name": product["name"], "product_category": product["product_category"],
                "instruction_text": ins["instruction"].strip(".") + price_text,
                "attributes": ins["instruction_attributes"], "price_upper": upper,
                "goal_options": list(ins["instruction_options"]), "weight": 1,
            })
    return goals


def load_catalog(data_dir: str | Path, size: str = "small", seed: int = 0, shuffle_goals: bool = True) -> Catalog:
    """WebShop's products and human goals from ``data_dir`` (see the module docstring).

    Args:
        data_dir: the folder holding WebShop's files.
        size: ``"small"`` (the 1,000-product files) or ``"full"``.
        seed: seeds the product prices within their ranges and the goals' price ceilings.
        shuffle_goals: number the goals as WebShop does (shuffled with seed 233), or in the
            files' order (as AgentFly's WebShop server does).

    Raises:
        EnvUnavailable: a file is missing; the message names the path and where the data comes from.
    """
    if size not in FILES:
        raise ValueError(f"size must be one of {sorted(FILES)}, got {size!r}")
    folder = Path(data_dir).expanduser()
    paths = [folder / name for name in (*FILES[size], HUMAN_GOALS_FILE)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise EnvUnavailable(
            f"webshop: no WebShop data at {', '.join(missing)}. The files come from WebShop's "
            "setup.sh (github.com/princeton-nlp/WebShop, README 'Setup': the data links it "
            "downloads into data/); put them in one folder and name it as the environment's "
            "data_dir, or leave data_dir unset for the generated catalog"
        )
    raw_products, attributes, human = (json.loads(p.read_text(encoding="utf-8")) for p in paths)
    rng = random.Random(seed)
    products, seen = [], set()
    for raw in raw_products:
        asin = raw.get("asin")
        if not asin or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_process_product(raw, attributes))
    prices = {p["asin"]: _product_price(p["pricing"], rng) for p in products}
    goals = _human_goals(products, prices, human, rng)
    if shuffle_goals:
        random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(products, prices, goals)


# ---------------------------------------------------------------------- a generated catalog

_BRANDS = ["Northway", "Acme", "Lumen", "Bexley", "Corvin", "Dalia", "Everly", "Fenwick", "Glenmore", "Harlow"]
_COLORS = ["black", "navy blue", "red", "grey", "white", "olive green"]
_TYPES = [
    # name, category, product category, query, attribute pool, options
    ("running shoes", "fashion", "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
     "men's running shoes", ["lightweight", "non slip", "rubber sole", "breathable", "memory foam"],
     {"color": _COLORS, "size": ["7", "8", "9", "10", "11"]}),
    ("t-shirt", "fashion", "Clothing, Shoes & Jewelry › Women › Clothing › Tops, Tees & Blouses › T-Shirts",
     "women's t-shirts", ["machine wash", "cotton", "short sleeve", "relaxed fit", "quick drying"],
     {"color": _COLORS, "size": ["small", "medium", "large", "x-large"]}),
    ("coffee mug", "home", "Home & Kitchen › Kitchen & Dining › Dining & Entertaining › Mugs",
     "coffee mugs", ["dishwasher safe", "microwave safe", "bpa free", "insulated", "lead free"],
     {"color": _COLORS, "size": ["11 oz", "15 oz"]}),
    ("desk lamp", "home", "Tools & Home Improvement › Lighting & Ceiling Fans › Lamps & Shades › Desk Lamps",
     "led desk lamps", ["dimmable", "usb charging", "eye caring", "touch control", "energy saving"],
     {"color": _COLORS}),
    ("shampoo", "beauty", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
     "sulfate free shampoo", ["sulfate free", "paraben free", "natural ingredients", "hair growth", "cruelty free"],
     {"size": ["8 fl oz", "16 fl oz", "32 fl oz"]}),
    ("yoga mat", "sports", "Sports & Outdoors › Exercise & Fitness › Yoga › Mats",
     "yoga mats", ["non slip", "eco friendly", "extra thick", "easy clean", "lightweight"],
     {"color": _COLORS, "size": ["4mm", "6mm", "8mm"]}),
]


def _asin(rng: random.Random) -> str:
    return "B0" + "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=8))


def _synthetic_product(rng: random.Random, type_: tuple) -> dict[str, Any]:
    kind, category, product_category, query, pool, option_space = type_
    attributes = rng.sample(pool, 2)
    brand = rng.choice(_BRANDS)
    title = f"{brand} {attributes[0].title()} {kind.title()}"
    options = {name: sorted(rng.sample(values, min(3, len(values)))) for name, values in option_space.items()}
    low = round(rng.uniform(8, 60), 2)
    pricing = [low] if rng.random() < 0.5 else [low, round(low + rng.uniform(1, 10), 2)]
    price_tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    return {
        "asin": _asin(rng), "name": title, "Title": title, "category": category, "query": query,
        "product_category": product_category,
        "Description": f"A {kind} by {brand}: {attributes[0]} and {attributes[1]}.",
        "BulletPoints": [f"{a.capitalize()}" for a in attributes] + [f"Made by {brand}"],
        "pricing": pricing, "Price": price_tag, "Rating": "N.A.", "Reviews": [],
        "options": options, "Attributes": attributes,
    }


def _synthetic_goal(product: dict[str, Any], price: float, rng: random.Random) -> dict[str, Any]:
    attributes = rng.sample(product["Attributes"], rng.randint(1, 2))
    chosen = {name: rng.choice(values) for name, values in product["options"].items()}
    kind = product["Description"].split(" by ")[0].removeprefix("A ")
    option_text = ", and ".join(f"{name}: {value}" for name, value in chosen.items())
    upper, price_text = _price_upper(price, rng)
    return {
        "asin": product["asin"], "category": product["category"], "query": product["query"],
        "name": product["name"], "product_category": product["product_category"],
        "instruction_text": f"i need a {' and '.join(attributes)} {kind}"
                            + (f" with {option_text}" if option_text else "") + price_text,
        "attributes": attributes, "price_upper": upper, "goal_options": list(chosen.values()),
        "weight": 1,
    }


def synthetic_catalog(num_products: int = 30, num_goals: int = 20, seed: int = 0) -> Catalog:
    """A generated catalog: ``num_products`` products over six product types (two attributes
    each, colour and size options), and ``num_goals`` goals for products drawn from it; the same
    for the same arguments."""
    if num_products < 1 or num_goals < 0:
        raise ValueError(f"need at least one product and no negative goal count, got {num_products}, {num_goals}")
    rng = random.Random(seed)
    products = [_synthetic_product(rng, _TYPES[i % len(_TYPES)]) for i in range(num_products)]
    prices = {p["asin"]: round(_product_price(p["pricing"], rng), 2) for p in products}
    targets = [products[rng.randrange(num_products)] for _ in range(num_goals)]
    goals = [_synthetic_goal(p, prices[p["asin"]], rng) for p in targets]
    return Catalog(products, prices, goals)
