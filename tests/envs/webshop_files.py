"""WebShop's three data files (its format) for three products and one human goal, for the tests:
the goal "waterproof hiking boots with a rubber sole in brown, size 10" (2 attributes, 2 options)."""

from __future__ import annotations

import json
from pathlib import Path

BOOTS, PLAIN_BOOTS, TOWEL = "B000000001", "B000000002", "B000000003"
OPTIONS = {"Color": [{"value": "Brown"}, {"value": "Black"}], "Size": [{"value": "9"}, {"value": "10"}]}


def product(asin, name, category, query, path, description, bullets, pricing, options=None):
    return {"asin": asin, "name": name, "category": category, "query": query, "product_category": path,
            "full_description": description, "small_description": bullets, "pricing": pricing,
            "customization_options": options}


def write_webshop_files(folder: Path) -> Path:
    """Writes the three files into ``folder``; returns it."""
    hiking = "Clothing, Shoes & Jewelry › Men › Shoes › Outdoor › Hiking"
    products = [
        product(BOOTS, "Trailblazer Waterproof Hiking Boots", "fashion", "hiking boots", hiking,
                "Leather boots for long trails.", ["Waterproof leather upper", "Rubber sole"], "$45.00", OPTIONS),
        product(PLAIN_BOOTS, "Trailblazer Hiking Boots", "fashion", "hiking boots", hiking,
                "Canvas boots for short walks.", ["Canvas upper", "Rubber sole"], "$30.00", OPTIONS),
        product(TOWEL, "Sunny Beach Towel", "home", "beach towels", "Home & Kitchen › Bath › Towels › Beach Towels",
                "A cotton towel.", ["Cotton"], "$12.00$15.00"),
    ]
    attributes = {BOOTS: {"attributes": ["waterproof", "rubber sole"]}, PLAIN_BOOTS: {"attributes": ["rubber sole"]},
                  TOWEL: {"attributes": ["cotton"]}}
    goals = {BOOTS: [{"instruction": "i want waterproof hiking boots with a rubber sole in brown, size 10.",
                      "instruction_attributes": ["waterproof", "rubber sole"], "instruction_options": ["brown", "10"]}]}
    for name, content in [("items_shuffle_1000.json", products), ("items_ins_v2_1000.json", attributes),
                          ("items_human_ins.json", goals)]:
        (folder / name).write_text(json.dumps(content))
    return folder
