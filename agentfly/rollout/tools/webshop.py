"""WebShop's tools, AgentFly's names: ``webshop_browser_action`` and ``webshop_browser``.

Both act on the chain's ``webshop`` environment (:mod:`agentfly.envs.webshop`: WebShop's data
given as ``data_dir``, else a generated catalog), reset with the chain's row (``task_id``, the
goal's index). ``webshop_browser_action`` takes WebShop's own actions, ``search[query]`` and
``click[element]`` (``choose[...]`` reads as ``click[...]``, as in AgentFly); ``webshop_browser``
takes the verb and its value apart. The observation is the page's text, then, as AgentFly's
WebShop server shows them, ``Clickables: [...]`` (lowercased; ``search`` on the search page).
Buying ends the episode and the chain; ``webshop_reward`` scores the purchase.

    agent.init_config.tool_config.webshop_browser_action.data_dir=/data/webshop
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.environment import EnvSettings, act, env_tool

DESCRIPTION = (
    "Browse the webshop by searching or clicking. The action is either 'search' or 'click' and "
    "the value is the search query or the element to click. Clickables: 'Buy Now', 'Next >', "
    "'< Prev', 'Back to Search', 'Description', 'Features', 'Reviews', product ASIN or ID like "
    "'B079HGJ5MH' and their attributes or variants like 'Yellow', 'Blue', 'Small', 'Large', "
    "'XL', '40x60', etc."
)
DATA_FILES = {"small": "items_shuffle_1000.json", "full": "items_shuffle.json"}


@dataclasses.dataclass(frozen=True)
class WebShopSettings(EnvSettings):
    """The ``webshop`` environment's settings (see :class:`agentfly.envs.webshop.WebShopEnv`).

    Attributes:
        data_dir: folder of WebShop's data files (None: the generated catalog).
        size: ``small`` or ``full`` WebShop files.
        seed: seeds the prices (and the generated catalog).
        shuffle_goals: with ``data_dir``, number the goals as WebShop does (False: in the files'
            order, as AgentFly's ``task_id`` does).
        num_products: products of the generated catalog.
        num_goals: goals of the generated catalog.
    """

    max_steps: int | None = 15
    data_dir: str | None = None
    size: str = "small"
    seed: int = 0
    shuffle_goals: bool = False
    num_products: int = 30
    num_goals: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size not in DATA_FILES:
            raise ValueError(f"size must be one of {', '.join(DATA_FILES)}, got {self.size!r}")
        if self.shuffle_goals and self.data_dir is None:
            raise ValueError("shuffle_goals numbers WebShop's own goals: it needs data_dir")

    def env_kwargs(self) -> dict:
        kwargs = super().env_kwargs()
        if self.data_dir is None:  # the generated catalog has one order
            kwargs.pop("shuffle_goals")
        return kwargs

    def environment_problem(self) -> str | None:
        if importlib.util.find_spec("rapidfuzz") is None:
            return "the webshop environment needs rapidfuzz: pip install 'agentfly[envs]'"
        if self.data_dir is not None and not (Path(self.data_dir) / DATA_FILES[self.size]).is_file():
            return (f"no WebShop data at {Path(self.data_dir) / DATA_FILES[self.size]} (data_dir): "
                    "WebShop's setup.sh downloads its files (github.com/princeton-nlp/WebShop)")
        return None


def with_clickables(observation: str, admissible: list[str]) -> str:
    """The page, then ``Clickables: [...]`` as AgentFly's WebShop server lists them."""
    clickables = ["search"] if any(a.startswith("search[") for a in admissible) else []
    clickables += [a[len("click["):-1].lower() for a in admissible if a.startswith("click[")]
    return f"{observation}\nClickables: {clickables}" if clickables else observation


def _browse(resource, action: str) -> ToolResult:
    result = act(resource, action)
    if result.ok and not result.ends_chain:
        result.observation = with_clickables(result.observation, resource.info().get("admissible_actions", []))
    return result


@env_tool(name="webshop_browser_action", environment="webshop", settings=WebShopSettings,
          description=DESCRIPTION, max_resources=16)
def webshop_browser_action(action: str, resource) -> ToolResult:
    """Take one action in the WebShop web environment.

    Args:
        action: ``search[query]`` on the search page, or ``click[element]`` (or
            ``choose[element]``) on a clickable element of the page.
    """
    text = action.strip()
    if text[:6].lower() == "choose":
        text = "click" + text[6:]
    return _browse(resource, text)


@env_tool(name="webshop_browser", environment="webshop", settings=WebShopSettings,
          description=DESCRIPTION, max_resources=16)
def webshop_browser(action: str, value: str, resource) -> ToolResult:
    """Search the webshop or click an element of its page.

    Args:
        action: ``search`` or ``click``.
        value: the search query, or the element to click.
    """
    if action not in ("search", "click"):
        return ToolResult(observation=f"Error: Invalid action '{action}'. Must be either 'search' or 'click'")
    return _browse(resource, f"{action}[{value}]")
