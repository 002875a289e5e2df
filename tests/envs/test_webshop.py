"""WebShop: the simulator's pages and actions, WebShop's data files, the generated catalog, and
WebShop's purchase reward derived by hand:

    reward = r_type * (attributes matched + options matched + [price ok]) / (attributes + options + 1)

for the goal "waterproof, rubber sole hiking boots in brown, size 10" (2 attributes, 2 options)."""

from __future__ import annotations

import json

import pytest

from agentfly.envs import EnvUnavailable, EnvUsageError
from agentfly.envs.webshop import WebShopEnv
from agentfly.envs.webshop_catalog import load_catalog, synthetic_catalog
from tests.envs.webshop_files import BOOTS, PLAIN_BOOTS, TOWEL, write_webshop_files

pytest.importorskip("rapidfuzz", reason="needs rapidfuzz (pip install 'agentfly[envs]')")

@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """WebShop's three files (its format) for three products and one human goal."""
    return write_webshop_files(tmp_path_factory.mktemp("webshop"))


@pytest.fixture
def shop(data_dir):
    env = WebShopEnv(data_dir=str(data_dir))
    env.reset({"task_id": 0})
    return env


def buy(env, asin, options):
    env.step("search[waterproof hiking boots]")
    env.step(f"click[{asin}]")
    for option in options:
        env.step(f"click[{option}]")
    return env.step("click[Buy Now]")


def test_the_files_load_as_webshop_processes_them(data_dir):
    catalog = load_catalog(data_dir)
    boots = catalog.by_asin[BOOTS]
    assert boots["options"] == {"color": ["brown", "black"], "size": ["9", "10"]}
    assert boots["Price"] == "$45.0" and catalog.prices[BOOTS] == 45.0
    assert catalog.by_asin[TOWEL]["Price"] == "$12.0 to $15.0" and 12.0 <= catalog.prices[TOWEL] <= 15.0
    (goal,) = catalog.goals
    # the ceiling is drawn from the two of the next four price points above 45 (50 60 70 80)
    assert goal["price_upper"] in (60.0, 70.0, 80.0)
    assert goal["instruction_text"] == ("i want waterproof hiking boots with a rubber sole in brown, size 10"
                                        f", and price lower than {goal['price_upper']:.2f} dollars")


def test_goals_are_numbered_as_webshop_or_in_the_files_order(data_dir, tmp_path):
    import random
    import shutil

    for name in ("items_shuffle_1000.json", "items_ins_v2_1000.json"):
        shutil.copy(data_dir / name, tmp_path / name)
    instructions = [f"goal number {i}" for i in range(6)]
    human = {BOOTS: [{"instruction": text, "instruction_attributes": ["waterproof"], "instruction_options": []}
                     for text in instructions]}
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    in_order = [g["instruction_text"].split(",")[0] for g in load_catalog(tmp_path, shuffle_goals=False).goals]
    assert in_order == instructions
    webshop_order = list(instructions)
    random.Random(233).shuffle(webshop_order)  # WebShop's own numbering
    assert [g["instruction_text"].split(",")[0] for g in load_catalog(tmp_path).goals] == webshop_order
    with pytest.raises(ValueError, match="shuffle_goals applies to WebShop's data"):
        WebShopEnv(shuffle_goals=False)


def test_the_right_search_and_buy_sequence_scores_one(shop):
    result = buy(shop, BOOTS, ["brown", "10"])
    assert result.terminated and result.reward == 1.0 and result.observation == "Thank you for shopping with us!"


def test_a_product_missing_an_attribute_scores_webshop_formula(shop):
    # rubber sole yes, waterproof nowhere in its attributes, title, features or description:
    # (1 attribute + 2 options + price) / 5, r_type 1 (same query)
    result = buy(shop, PLAIN_BOOTS, ["brown", "10"])
    assert result.reward == pytest.approx(4 / 5)
    assert result.info["reward_parts"]["attributes_matched"] == 1


def test_options_not_chosen_or_wrong_score_less(shop):
    assert buy(shop, BOOTS, []).reward == pytest.approx(3 / 5)  # 2 attributes + price


def test_a_wrong_color_misses_its_option(data_dir):
    env = WebShopEnv(data_dir=str(data_dir))
    env.reset({"task_id": 0})
    assert buy(env, BOOTS, ["black", "10"]).reward == pytest.approx(4 / 5)


def test_a_product_of_another_type_scores_zero(shop):
    shop.step("search[beach towel]")
    shop.step(f"click[{TOWEL}]")
    result = shop.step("click[Buy Now]")
    assert result.reward == 0.0 and result.info["reward_parts"]["r_type"] == 0.0


def test_pages_show_webshop_text_and_refuse_impossible_actions(shop):
    observation, info = shop.reset({"task_id": 0})
    assert observation.startswith("WebShop [SEP] Instruction: [SEP] i want waterproof hiking boots")
    assert info["walkthrough"][-1] == "click[Buy Now]" and "search[<your query>]" in info["admissible_actions"]
    results = shop.step("search[waterproof hiking boots]")
    assert "Page 1 (Total results: 2)" in results.observation
    assert results.observation.index(BOOTS) < results.observation.index(PLAIN_BOOTS)  # BM25 puts it first
    refused = shop.step("search[towel]")
    assert refused.info["invalid"] and "only search on the search page" in refused.observation
    assert shop.step(f"click[{TOWEL}]").info["invalid"]  # not on this page
    item = shop.step(f"click[{BOOTS.lower()}]")  # clicks are case-insensitive
    assert "color [SEP] brown [SEP] black [SEP] size [SEP] 9 [SEP] 10" in item.observation
    assert "[clicked] brown" in shop.step("click[Brown]").observation
    assert shop.step("click[Features]").observation.endswith("Waterproof leather upper [SEP] Rubber sole")
    assert shop.step("click[< Prev]").observation.count("Buy Now") == 1
    assert shop.step("buy it").info["invalid"]


def test_a_walkthrough_of_every_generated_goal_scores_one():
    env = WebShopEnv(num_products=30, num_goals=20, seed=5)
    for task_id in range(20):
        _, info = env.reset({"task_id": task_id})
        results = [env.step(a) for a in info["walkthrough"]]
        assert results and results[-1].reward == 1.0, (task_id, info["walkthrough"])


def test_the_generated_catalog_is_the_same_for_the_same_seed():
    first, again, other = synthetic_catalog(20, 5, seed=1), synthetic_catalog(20, 5, seed=1), synthetic_catalog(20, 5, seed=2)
    assert first.goals == again.goals and first.products == again.products
    assert first.goals != other.goals
    assert {g["asin"] for g in first.goals} <= set(first.by_asin)


def test_missing_data_names_the_path_and_where_the_data_comes_from(tmp_path):
    with pytest.raises(EnvUnavailable, match=r"no WebShop data at .*items_shuffle_1000.json.*setup.sh"):
        WebShopEnv(data_dir=str(tmp_path / "nowhere"))


def test_a_task_row_must_name_a_goal(shop):
    with pytest.raises(EnvUsageError, match="task_id 7 is not a goal"):
        shop.reset({"task_id": 7})
    with pytest.raises(EnvUsageError, match="needs a 'task_id' or a 'goal'"):
        shop.reset({"question": "?"})
