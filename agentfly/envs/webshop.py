"""WebShop: a text-mode simulator of WebShop's shop (Yao et al., 2022) and its purchase reward.

Pages, as WebShop's text mode shows them (its page texts joined by ``[SEP]``): the search page,
a results page (10 products of at most 50 results: asin, title, price), an item page (options,
title, price, rating and the Description, Features, Reviews and Buy Now buttons) and an item's
detail page. Actions: ``search[query]`` on the search page, ``click[element]`` on a clickable
(case-insensitive): ``Back to Search``, ``Next >``, ``< Prev``, an asin, an option value,
``Description``, ``Features``, ``Reviews``, ``Buy Now``. An action that is not possible on the
page changes nothing and says why (reward 0). Buying ends the episode with the reward of
:func:`agentfly.envs.webshop_reward.purchase_reward`; no other step is rewarded.

The catalog: WebShop's own data files when ``data_dir`` is given
(:func:`agentfly.envs.webshop_catalog.load_catalog`), else a generated one
(:func:`agentfly.envs.webshop_catalog.synthetic_catalog`). A task row picks a goal by its
``task_id`` (the goal's index, as in AgentFly's rows) or carries the ``goal`` itself. The info of
``reset`` has the ``goal`` (the instruction), ``admissible_actions`` and a ``walkthrough`` (search
the goal product's name, open it, choose the goal's options, buy).

:func:`make_data` writes the task rows of every goal (``question``: the search page, which holds
the goal's instruction; ``task_id``), as AgentFly's ``webshop_goals_{train,val}.json``::

    python -m agentfly.envs.webshop make-data --out data/webshop --val 4

(with ``--data-dir`` for WebShop's data; the catalog's settings must be the tool's,
``agent.init_config.tool_config.webshop_browser_action.<setting>``).

Departures from WebShop: ``Next >`` shows only while more results follow; the Attributes button
is not shown (WebShop hides it too unless asked); a chosen option shows as ``[clicked] value`` (as
WebShop's rich text mode marks it); reviews are not part of the data.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfly.envs.base import Env, EnvUsageError, StepResult, register_env
from agentfly.envs.webshop_catalog import Catalog, load_catalog, synthetic_catalog
from agentfly.envs.webshop_reward import goal_problem, purchase_reward

PRODUCT_WINDOW = 10
SEP = " [SEP] "
BACK_TO_SEARCH, NEXT_PAGE, PREV_PAGE, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
DETAIL_PAGES = ("Description", "Features", "Reviews")
_ACTION = re.compile(r"^\s*(search|click)\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


@functools.cache
def _cached_catalog(
    data_dir: str | None,
    size: str,
    seed: int,
    shuffle_goals: bool,
    num_products: int,
    num_goals: int,
) -> Catalog:
    if data_dir is not None:
        return load_catalog(data_dir, size=size, seed=seed, shuffle_goals=shuffle_goals)
    return synthetic_catalog(num_products=num_products, num_goals=num_goals, seed=seed)


@dataclass
class _Page:
    kind: str = "search"  # search | results | item | detail | done
    query: str = ""
    results: list[str] = field(default_factory=list)
    page: int = 1
    asin: str = ""
    options: dict[str, str] = field(default_factory=dict)
    detail: str = ""


@register_env("webshop")
class WebShopEnv(Env):
    """A WebShop session per episode.

    ``reset(task, seed)``: the task row decides the episode (its goal; the prices are the
    catalog's, drawn when the environment is made), and ``seed`` is not used: as in WebShop, a
    goal's session is the same every time. A goal carried by the row must be one WebShop's reward
    can score (:func:`agentfly.envs.webshop_reward.goal_problem`).

    Args:
        data_dir: folder of WebShop's data files (None: the generated catalog).
        size: ``"small"`` or ``"full"`` WebShop files.
        seed: seeds the prices (and the generated catalog).
        shuffle_goals: with WebShop's data, number the goals as WebShop does (False: in the
            files' order, as AgentFly's ``task_id`` does).
        num_products: products of the generated catalog.
        num_goals: goals of the generated catalog.
        max_steps: steps after which the episode is truncated.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        size: str = "small",
        seed: int = 0,
        shuffle_goals: bool = True,
        num_products: int = 30,
        num_goals: int = 20,
        max_steps: int | None = 15,
    ) -> None:
        super().__init__(max_steps=max_steps)
        if data_dir is None and not shuffle_goals:
            raise ValueError(
                "shuffle_goals applies to WebShop's data (data_dir); the generated catalog has one order"
            )
        self.catalog = _cached_catalog(
            None if data_dir is None else str(data_dir),
            size,
            seed,
            shuffle_goals,
            num_products,
            num_goals,
        )
        self.goal: dict[str, Any] = {}
        self._page = _Page()

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        if isinstance(task.get("goal"), dict):
            goal = task["goal"]
        elif task.get("task_id") is not None:
            index = int(task["task_id"])
            if not 0 <= index < len(self.catalog.goals):
                raise EnvUsageError(
                    f"webshop: task_id {index} is not a goal (0..{len(self.catalog.goals) - 1})"
                )
            goal = self.catalog.goals[index]
        else:
            raise EnvUsageError(
                f"webshop: the task row needs a 'task_id' or a 'goal' (it has {sorted(task)})"
            )
        problem = goal_problem(goal)
        if problem is not None:
            raise EnvUsageError(f"webshop: {problem}")
        self.goal = goal
        self._page = _Page()
        return self._render(), {
            "goal": self.goal["instruction_text"],
            "admissible_actions": self.admissible_actions(),
            "walkthrough": self.walkthrough(),
        }

    # ------------------------------------------------------------------ pages

    def _instruction(self) -> list[str]:
        return ["Instruction:", self.goal["instruction_text"]]

    def clickables(self) -> list[str]:
        """The elements ``click[...]`` accepts on the current page, as shown."""
        page = self._page
        if page.kind == "results":
            shown = self._shown()
            return [
                BACK_TO_SEARCH,
                *([PREV_PAGE] if page.page > 1 else []),
                *([NEXT_PAGE] if page.page * PRODUCT_WINDOW < len(page.results) else []),
                *shown,
            ]
        if page.kind == "item":
            values = [
                v for values in self.catalog.by_asin[page.asin]["options"].values() for v in values
            ]
            return [BACK_TO_SEARCH, PREV_PAGE, *values, *DETAIL_PAGES, BUY_NOW]
        if page.kind == "detail":
            return [BACK_TO_SEARCH, PREV_PAGE]
        return []

    def admissible_actions(self) -> list[str]:
        search = ["search[<your query>]"] if self._page.kind == "search" else []
        return search + [f"click[{c}]" for c in self.clickables()]

    def _shown(self) -> list[str]:
        start = (self._page.page - 1) * PRODUCT_WINDOW
        return self._page.results[start : start + PRODUCT_WINDOW]

    def _render(self) -> str:
        page = self._page
        if page.kind == "search":
            return SEP.join(["WebShop", *self._instruction(), "Search"])
        if page.kind == "done":
            return "Thank you for shopping with us!"
        parts = [*self._instruction(), BACK_TO_SEARCH]
        if page.kind == "results":
            parts.append(f"Page {page.page} (Total results: {len(page.results)})")
            parts += [c for c in (PREV_PAGE, NEXT_PAGE) if c in self.clickables()]
            for asin in self._shown():
                product = self.catalog.by_asin[asin]
                parts += [asin, product["Title"], product["Price"]]
            return SEP.join(parts)
        product = self.catalog.by_asin[page.asin]
        parts.append(PREV_PAGE)
        if page.kind == "detail":
            body = {
                "Description": [product["Description"]],
                "Features": product["BulletPoints"],
                "Reviews": [r.get("body", "") for r in product["Reviews"]] or ["No reviews."],
            }[page.detail]
            return SEP.join(parts + body)
        for name, values in product["options"].items():
            parts += [
                name,
                *(f"[clicked] {v}" if page.options.get(name) == v else v for v in values),
            ]
        parts += [
            product["Title"],
            f"Price: {product['Price']}",
            f"Rating: {product['Rating']}",
            *DETAIL_PAGES,
            BUY_NOW,
        ]
        return SEP.join(parts)

    # ------------------------------------------------------------------ actions

    def _step(self, action: str) -> StepResult:
        match = _ACTION.match(action)
        if match is None:
            return self._invalid(f"Invalid action {action!r}: use search[query] or click[element].")
        verb, argument = match.group(1).lower(), match.group(2).strip()
        if verb == "search":
            if self._page.kind != "search":
                return self._invalid(
                    "You can only search on the search page; click[Back to Search] first."
                )
            if not argument:
                return self._invalid("search[...] needs a query.")
            self._page = _Page(
                kind="results", query=argument, results=self.catalog.search(argument)
            )
            return self._observe()
        by_text = {c.lower(): c for c in self.clickables()}
        element = by_text.get(argument.lower())
        if element is None:
            return self._invalid(
                f"Invalid action: {argument!r} is not clickable here. Clickables: {self.clickables()}"
            )
        if element == BUY_NOW:
            return self._buy()
        self._click(element)
        return self._observe()

    def _click(self, element: str) -> None:
        page = self._page
        if element == BACK_TO_SEARCH:
            self._page = _Page()
        elif element == NEXT_PAGE and page.kind == "results":
            page.page += 1
        elif element == PREV_PAGE and page.kind == "results":
            page.page -= 1
        elif element == PREV_PAGE and page.kind == "item":
            page.kind, page.asin, page.options = "results", "", {}
        elif element == PREV_PAGE:  # a detail page: back to its item
            page.kind = "item"
        elif page.kind == "results":  # an asin
            page.kind, page.asin, page.options = "item", element, {}
        elif element in DETAIL_PAGES:
            page.kind, page.detail = "detail", element
        else:  # an option value of the item
            for name, values in self.catalog.by_asin[page.asin]["options"].items():
                if element in values:
                    page.options[name] = element
                    break

    def _buy(self) -> StepResult:
        product = self.catalog.by_asin[self._page.asin]
        price = self.catalog.prices[product["asin"]]
        reward, parts = purchase_reward(product, self.goal, price, self._page.options)
        info = {
            "asin": product["asin"],
            "options": dict(self._page.options),
            "price": price,
            "won": reward >= 1.0,
            "reward_parts": parts,
            "admissible_actions": [],
        }
        self._page = _Page(kind="done")
        return StepResult(self._render(), float(reward), terminated=True, info=info)

    def _observe(self) -> StepResult:
        return StepResult(
            self._render(), 0.0, info={"admissible_actions": self.admissible_actions()}
        )

    def _invalid(self, message: str) -> StepResult:
        return StepResult(
            message, 0.0, info={"admissible_actions": self.admissible_actions(), "invalid": True}
        )

    def walkthrough(self) -> list[str]:
        """Actions that buy the goal's product with the goal's options (empty if its name does
        not find it)."""
        target = self.goal.get("asin")
        results = (
            self.catalog.search(self.catalog.by_asin[target]["name"])
            if target in self.catalog.by_asin
            else []
        )
        if target not in results:
            return []
        page = results.index(target) // PRODUCT_WINDOW
        product = self.catalog.by_asin[target]
        goal_options = self.goal["goal_options"]  # WebShop's synthetic goals: {name: value}
        chosen = goal_options.values() if isinstance(goal_options, dict) else goal_options
        wanted = [str(o).lower() for o in chosen]
        options = [v for values in product["options"].values() for v in values if v in wanted]
        return (
            [f"search[{product['name']}]"]
            + [f"click[{NEXT_PAGE}]"] * page
            + [f"click[{target}]"]
            + [f"click[{o}]" for o in options]
            + [f"click[{BUY_NOW}]"]
        )


def make_data(out_dir: str | Path, val: int, **env_kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    """A row per goal of the catalog ``env_kwargs`` make, the last ``val`` of them held out for
    validation, written as ``webshop_goals_train.json`` and ``webshop_goals_val.json`` in
    ``out_dir`` (JSON lists, AgentFly's names)."""
    env = WebShopEnv(**env_kwargs)
    rows = []
    for task_id in range(len(env.catalog.goals)):
        page, _ = env.reset({"task_id": task_id})
        rows.append({"question": page, "task_id": task_id})
    if not 0 <= val < len(rows):
        raise ValueError(
            f"val must be within 0..{len(rows) - 1} (the catalog has {len(rows)} goals), got {val}"
        )
    splits = {"train": rows[: len(rows) - val], "val": rows[len(rows) - val :]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        (out / f"webshop_goals_{name}.json").write_text(json.dumps(split, indent=1))
    return splits


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="WebShop task rows (AgentFly's webshop_goals_{train,val}.json)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    rows = commands.add_parser("make-data", help="a row per goal of the catalog")
    rows.add_argument("--out", required=True)
    rows.add_argument(
        "--val", type=int, default=4, help="goals held out for validation (the last ones)"
    )
    rows.add_argument(
        "--data-dir", default=None, help="WebShop's data files (default: the generated catalog)"
    )
    rows.add_argument("--size", default="small", choices=["small", "full"])
    rows.add_argument(
        "--shuffle-goals", action="store_true", help="number WebShop's goals as WebShop does"
    )
    rows.add_argument("--seed", type=int, default=0)
    rows.add_argument("--num-products", type=int, default=30)
    rows.add_argument("--num-goals", type=int, default=20)
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"seed": args.seed}
    if args.data_dir is None:
        kwargs.update(num_products=args.num_products, num_goals=args.num_goals)
    else:
        kwargs.update(data_dir=args.data_dir, size=args.size, shuffle_goals=args.shuffle_goals)
    splits = make_data(args.out, args.val, **kwargs)
    print(f"{len(splits['train'])} train and {len(splits['val'])} validation goals in {args.out}")


if __name__ == "__main__":
    main()
