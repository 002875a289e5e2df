"""``webshop_reward``: registered for AgentFly's WebShop command; WebShop is not shipped."""

from __future__ import annotations

from agentfly.rollout.rewards.base import reward


@reward(name="webshop_reward")
def webshop_reward(prediction: str) -> float:
    """Raises: scoring WebShop purchases needs the WebShop environment (counted as a failure)."""
    raise RuntimeError("webshop_reward needs the WebShop environment, which is not available here")
