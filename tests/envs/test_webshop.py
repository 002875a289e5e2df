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
    assert (
        catalog.by_asin[TOWEL]["Price"] == "$12.0 to $15.0"
        and 12.0 <= catalog.prices[TOWEL] <= 15.0
    )
    (goal,) = catalog.goals
    # the ceiling is drawn from the two of the next four price points above 45 (50 60 70 80)
    assert goal["price_upper"] in (60.0, 70.0, 80.0)
    assert goal["instruction_text"] == (
        "i want waterproof hiking boots with a rubber sole in brown, size 10"
        f", and price lower than {goal['price_upper']:.2f} dollars"
    )


def test_goals_are_numbered_as_webshop_or_in_the_files_order(data_dir, tmp_path):
    import random
    import shutil

    for name in ("items_shuffle_1000.json", "items_ins_v2_1000.json"):
        shutil.copy(data_dir / name, tmp_path / name)
    instructions = [f"goal number {i}" for i in range(6)]
    human = {
        BOOTS: [
            {
                "instruction": text,
                "instruction_attributes": ["waterproof"],
                "instruction_options": [],
            }
            for text in instructions
        ]
    }
    (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    in_order = [
        g["instruction_text"].split(",")[0]
        for g in load_catalog(tmp_path, shuffle_goals=False).goals
    ]
    assert in_order == instructions
    webshop_order = list(instructions)
    random.Random(233).shuffle(webshop_order)  # WebShop's own numbering
    assert [
        g["instruction_text"].split(",")[0] for g in load_catalog(tmp_path).goals
    ] == webshop_order
    with pytest.raises(ValueError, match="shuffle_goals applies to WebShop's data"):
        WebShopEnv(shuffle_goals=False)


def test_the_right_search_and_buy_sequence_scores_one(shop):
    result = buy(shop, BOOTS, ["brown", "10"])
    assert (
        result.terminated
        and result.reward == 1.0
        and result.observation == "Thank you for shopping with us!"
    )


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
    assert (
        info["walkthrough"][-1] == "click[Buy Now]"
        and "search[<your query>]" in info["admissible_actions"]
    )
    results = shop.step("search[waterproof hiking boots]")
    assert "Page 1 (Total results: 2)" in results.observation
    assert results.observation.index(BOOTS) < results.observation.index(
        PLAIN_BOOTS
    )  # BM25 puts it first
    refused = shop.step("search[towel]")
    assert refused.info["invalid"] and "only search on the search page" in refused.observation
    assert shop.step(f"click[{TOWEL}]").info["invalid"]  # not on this page
    item = shop.step(f"click[{BOOTS.lower()}]")  # clicks are case-insensitive
    assert "color [SEP] brown [SEP] black [SEP] size [SEP] 9 [SEP] 10" in item.observation
    assert "[clicked] brown" in shop.step("click[Brown]").observation
    assert shop.step("click[Features]").observation.endswith(
        "Waterproof leather upper [SEP] Rubber sole"
    )
    assert shop.step("click[< Prev]").observation.count("Buy Now") == 1
    assert shop.step("buy it").info["invalid"]


def test_a_walkthrough_of_every_generated_goal_scores_one_and_skipping_its_options_less():
    env = WebShopEnv(num_products=30, num_goals=20, seed=5)
    for task_id in range(20):
        _, info = env.reset({"task_id": task_id})
        goal, walkthrough = env.goal, info["walkthrough"]
        # it buys the goal's product with the goal's option values
        clicks = [a[len("click[") : -1] for a in walkthrough if a.startswith("click[")]
        assert clicks[-1] == "Buy Now" and goal["asin"] in clicks
        assert sorted(c for c in clicks if c not in ("Buy Now", "Next >", goal["asin"])) == sorted(
            goal["goal_options"]
        )
        bought = [env.step(a) for a in walkthrough][-1]
        assert (bought.reward, bought.info["asin"]) == (1.0, goal["asin"]), (task_id, walkthrough)
        # the same product with no option chosen: its attributes and price, none of the options
        env.reset({"task_id": task_id})
        option_clicks = {f"click[{o}]" for o in goal["goal_options"]}
        skipped = [env.step(a) for a in walkthrough if a not in option_clicks][-1]
        n_attr, n_option = len(goal["attributes"]), len(goal["goal_options"])
        assert n_option >= 1 and skipped.reward == pytest.approx(
            (n_attr + 1) / (n_attr + n_option + 1)
        )


def test_a_goal_with_webshops_synthetic_options_is_walked_and_scored(shop):
    # WebShop's synthetic goals give their options as {name: value}: matched as (name, value)
    hiking = "Clothing, Shoes & Jewelry › Men › Shoes › Outdoor › Hiking"
    goal = {"asin": BOOTS, "name": "Trailblazer Waterproof Hiking Boots", "query": "hiking boots",
            "product_category": hiking, "instruction_text": "i want waterproof boots, color: brown, size: 10",
            "attributes": ["waterproof"], "goal_options": {"color": "brown", "size": "10"}, "price_upper": 100.0}  # fmt: skip
    _, info = shop.reset({"goal": goal})
    assert info["walkthrough"] == ["search[Trailblazer Waterproof Hiking Boots]", f"click[{BOOTS}]",
                                   "click[brown]", "click[10]", "click[Buy Now]"]  # fmt: skip
    assert [shop.step(a) for a in info["walkthrough"]][-1].reward == 1.0
    shop.reset({"goal": goal})
    assert buy(shop, BOOTS, ["black", "10"]).reward == pytest.approx(3 / 4)  # waterproof, 10, price


def test_the_task_row_decides_the_episode_not_the_seed(shop):
    assert shop.reset({"task_id": 0}, seed=1) == shop.reset({"task_id": 0}, seed=2)
    assert buy(shop, BOOTS, ["brown", "10"]).reward == 1.0


def test_a_goal_webshops_reward_cannot_score_is_refused_at_reset(shop):
    goal = dict(shop.goal)
    with pytest.raises(EnvUsageError, match="needs at least one attribute"):
        shop.reset({"goal": goal | {"attributes": []}})
    with pytest.raises(EnvUsageError, match="needs a price_upper above 0, got 0"):
        shop.reset({"goal": goal | {"price_upper": 0}})
    assert shop.goal == goal  # the refused goals left the episode as it was


def test_the_generated_catalog_is_the_same_for_the_same_seed():
    first, again, other = (
        synthetic_catalog(20, 5, seed=1),
        synthetic_catalog(20, 5, seed=1),
        synthetic_catalog(20, 5, seed=2),
    )
    assert first.goals == again.goals and first.products == again.products
    assert first.goals != other.goals
    assert {g["asin"] for g in first.goals} <= set(first.by_asin)


def test_missing_data_names_the_path_and_where_the_data_comes_from(tmp_path):
    with pytest.raises(
        EnvUnavailable, match=r"no WebShop data at .*items_shuffle_1000.json.*setup.sh"
    ):
        WebShopEnv(data_dir=str(tmp_path / "nowhere"))


def test_a_task_row_must_name_a_goal(shop):
    with pytest.raises(EnvUsageError, match="task_id 7 is not a goal"):
        shop.reset({"task_id": 7})
    with pytest.raises(EnvUsageError, match="needs a 'task_id' or a 'goal'"):
        shop.reset({"question": "?"})
