"""A tool and a reward of your own: look up a country's capital, score the final answer."""

from agentfly.rollout.rewards import reward
from agentfly.rollout.tools import tool

CAPITALS = {"france": "Paris", "japan": "Tokyo", "kenya": "Nairobi", "peru": "Lima",
            "canada": "Ottawa", "egypt": "Cairo", "norway": "Oslo", "chile": "Santiago"}


@tool(timeout=5)
def capital_of(country: str) -> str:
    """Look up the capital city of a country.

    Args:
        country: the country's name in English.
    """
    return CAPITALS.get(country.strip().lower(), f"no capital known for {country!r}")


@reward(name="capital_match")
def capital_match(prediction: str, answer: str) -> dict:
    """1 when the final answer names the right city (any case), else 0."""
    right = float(answer.lower() in prediction.lower())
    return {"reward": right, "acc": right}
