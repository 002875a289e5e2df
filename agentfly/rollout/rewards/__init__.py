"""Rewards: registered functions that score a chain's final response.

Register one with ``@reward(name=...)``; the agent loop scores chains with ``compute_reward`` /
``acompute_reward`` (or ``score_trajectory``), which never raise for a failing reward. Importing
this package registers the built-ins: ``math_equal_reward``, ``math_equal_reward_tool``,
``math_equal_reward_think``, ``math_reward_thought_with_tool``, ``math_string_equal_reward_tool``,
``math_reward_string_equal``, ``math_reward_format``, ``qa_f1_reward``, ``qa_f1_reward_tool``,
``qa_em_reward``, ``qa_em_format_reward``, ``qa_em_reward_tool_call``, ``code_reward``,
``code_reward_test``, the vision-language ones (:mod:`agentfly.rollout.rewards.gui_rewards`):
``gui_reward``, ``gui_episode_reward``, ``gui_point_reward``, ``ok_vqa_reward``, ``infoseek_reward``, and the
environments' (:mod:`agentfly.rollout.rewards.env_rewards`):
``webshop_reward``, ``scienceworld_reward``, ``alfworld_episode_reward``, ``chess_puzzle_reward``,
``chess_puzzle_reward_simple``, ``textworld_reward``; ``swe_test_reward`` (the offline SWE
task's tests, :mod:`agentfly.rollout.rewards.swe_rewards`); AgentFly's LLM judges
``llm_as_judge_math_reward`` and ``llm_as_judge_reward``
(:mod:`agentfly.rollout.rewards.llm_judge`; a run binds them to their server,
``agent.init_config.reward_config``).
"""

from agentfly.rollout.rewards.base import (
    DEFAULT_TIMEOUT_S,
    REWARDS,
    RewardError,
    RewardInfo,
    RewardResult,
    acompute_reward,
    ascore_trajectory,
    bind_reward_kwargs,
    compute_reward,
    get_reward,
    reward,
    score_trajectory,
)
from agentfly.rollout.rewards.code_rewards import code_reward, code_reward_test
from agentfly.rollout.rewards.env_rewards import (
    alfworld_episode_reward,
    chess_puzzle_reward,
    chess_puzzle_reward_simple,
    scienceworld_reward,
    textworld_reward,
    webshop_reward,
)
from agentfly.rollout.rewards.gui_rewards import (
    gui_episode_reward,
    gui_point_reward,
    gui_reward,
    infoseek_reward,
    ok_vqa_reward,
)
from agentfly.rollout.rewards.llm_judge import llm_as_judge_math_reward, llm_as_judge_reward
from agentfly.rollout.rewards.math_rewards import (
    math_equal_reward,
    math_equal_reward_think,
    math_equal_reward_tool,
    math_reward_format,
    math_reward_string_equal,
    math_reward_thought_with_tool,
    math_string_equal_reward_tool,
)
from agentfly.rollout.rewards.qa_rewards import (
    qa_em_format_reward,
    qa_em_reward,
    qa_em_reward_tool_call,
    qa_f1_reward,
    qa_f1_reward_tool,
)
from agentfly.rollout.rewards.swe_rewards import swe_test_reward

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "REWARDS",
    "RewardError",
    "RewardInfo",
    "RewardResult",
    "acompute_reward",
    "alfworld_episode_reward",
    "ascore_trajectory",
    "bind_reward_kwargs",
    "chess_puzzle_reward",
    "chess_puzzle_reward_simple",
    "code_reward",
    "code_reward_test",
    "compute_reward",
    "get_reward",
    "gui_episode_reward",
    "gui_point_reward",
    "gui_reward",
    "infoseek_reward",
    "llm_as_judge_math_reward",
    "llm_as_judge_reward",
    "math_equal_reward",
    "math_equal_reward_think",
    "math_equal_reward_tool",
    "math_reward_format",
    "math_reward_string_equal",
    "math_reward_thought_with_tool",
    "math_string_equal_reward_tool",
    "ok_vqa_reward",
    "qa_em_format_reward",
    "qa_em_reward",
    "qa_em_reward_tool_call",
    "qa_f1_reward",
    "qa_f1_reward_tool",
    "reward",
    "scienceworld_reward",
    "score_trajectory",
    "swe_test_reward",
    "textworld_reward",
    "webshop_reward",
]
