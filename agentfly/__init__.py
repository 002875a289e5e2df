"""agentfly: reinforcement learning for multi-turn, tool-using LLM agents."""
__version__ = "0.1.0.dev0"
