"""The one typed record of a rollout chain.

The loss-mask rule lives here and nowhere else: tokens the engine sampled get mask 1 (and keep the
engine's log-probabilities); everything else after the prompt (tool observations, the template's text between turns
between turns) gets mask 0. Token ids are stored exactly as the engine produced them or as the
observation was tokenized on its own; nothing the model produced is decoded and re-encoded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly.core.images import ImageInput


@dataclass
class ToolCallRecord:
    """One tool call made by the model in a chain, and what came back."""

    name: str
    arguments: dict[str, Any] | str  # str when the model's arguments were not valid JSON
    observation: str
    ok: bool = True
    error: str | None = None  # "unknown_tool", "invalid_arguments", "timeout", "exception", ...
    turn: int = 0
    reward: float | None = None  # the environment's reward for the step this call took


@dataclass
class Trajectory:
    """One chain: a prompt and the multi-turn response that followed it.

    Shapes (P = prompt length, R = response length, counted in tokens):
        prompt_ids: (P,) the rendered prompt, as given to the engine.
        response_ids: (R,) every token after the prompt, sampled and observation alike.
        loss_mask: (R,) 1 where the engine sampled the token, 0 elsewhere.
        rollout_logprobs: (R,) the engine's log-probability of each sampled token; 0.0 where
            ``loss_mask`` is 0.
        turn_ids: (R,) the assistant turn (0-based) each token belongs to; observation tokens
            carry the turn that reads them (the next one).
        policy_versions: (R,) the policy version that sampled each token (the weights version
            the engine was given, :attr:`GenerationOutput.weights_version`); -1 where
            ``loss_mask`` is 0. A chain whose turns straddle a weight update mixes versions.
        turn_rewards: (num_turns,) the reward each assistant turn earned on its own: the sum of
            its tool calls' rewards (:attr:`ToolResult.reward
            <agentfly.rollout.tools.base.ToolResult>`, an environment step's reward), or, when the
            reward function returns ``turn_rewards``, those instead (they replace the tools').
            ``turn_ids`` maps tokens to these turns.
        turn_anchors: (num_turns,) the observation each assistant turn acted on, as text (GiGPO's
            anchor state): the user's question for the first turn, the previous turn's tool
            observations, one a line, for the others.

        images: the chain's images (:class:`~agentfly.core.images.ImageInput`: the data row's,
            then each one a tool or environment returned), in the order of their placeholder
            runs in ``prompt_ids + response_ids``; the engine generated from them and the
            trainer's forward reads them. Empty for a text chain.

    ``environments`` holds the episode of each environment the chain acted in, by environment
    name (:meth:`agentfly.rollout.tools.environment.EnvSession.record`: its goal, every step's
    action, reward, end flags and info, the return): what an environment's reward scores.

    A chain that folded its history (:mod:`agentfly.rollout.folding`) keeps each segment before
    the fold in ``folded``, in order: a ``Trajectory`` holding that segment's prompt, response,
    masks, log-probabilities, versions, turn ids and messages exactly as the engine was given and
    sampled them. This record's own token fields and ``messages`` are the last segment's; the
    chain's other fields (tool calls, turns, rewards, finish reason) are the whole chain's, and
    ``turn_ids`` count the chain's turns across segments.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    turn_anchors: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)  # the chat, as text
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    num_turns: int = 0
    finish_reason: str = ""  # answer | no_tool_call | episode_over | max_turns | max_model_len | error
    truncated: bool = False  # a turn hit its max_tokens before its end-of-turn marker
    final_response: str = ""
    group_id: int = 0  # chains of the same prompt share it
    chain_index: int = 0  # position of this chain inside its group
    row: dict[str, Any] = field(default_factory=dict)  # the data row (all fields)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    reward: float | None = None
    reward_extras: dict[str, Any] = field(default_factory=dict)
    reward_failed: bool = False
    reward_error: str | None = None  # the reward's kind of failure ("timeout", "malformed"...)
    overlong_reward: float = 0.0  # DAPO's length penalty included in `reward` (rewards/overlong.py)
    error: str | None = None
    folded: list[Trajectory] = field(default_factory=list)  # the segments before each fold
    # how the reward spreads over the segments (rollout.folding.decompose_reward's modes): a
    # fold's `last_only`, a harness chain's `broadcast` (each segment gets the chain's reward)
    segment_reward: str = "last_only"
    # a harness chain's counts (rollout.harness): requests, breaks (requests that rewrote the
    # history: a new segment each), malformed (requests answered 400); empty for built-in chains
    harness: dict[str, int] = field(default_factory=dict)
    images: list[ImageInput] = field(default_factory=list)

    @property
    def segments(self) -> list[Trajectory]:
        """The chain's training segments: each folded one, then this one (one for no fold)."""
        return [*self.folded, self]

    def fold(self, prompt_ids: list[int], messages: list[dict[str, Any]]) -> None:
        """Close the current segment (kept in ``folded``) and go on from ``prompt_ids``, the
        folded history the engine is given next, with an empty response."""
        self.folded.append(Trajectory(
            prompt_ids=self.prompt_ids, response_ids=self.response_ids, loss_mask=self.loss_mask,
            rollout_logprobs=self.rollout_logprobs, turn_ids=self.turn_ids,
            policy_versions=self.policy_versions, messages=self.messages,
            group_id=self.group_id, chain_index=self.chain_index, images=self.images,
        ))
        self.images = []
        self.prompt_ids, self.messages = list(prompt_ids), list(messages)
        self.response_ids, self.loss_mask, self.rollout_logprobs = [], [], []
        self.turn_ids, self.policy_versions = [], []

    def room(self, max_model_len: int, max_response_len: int | None) -> tuple[int, str]:
        """Tokens the chain may still add, and the limit that binds (its finish reason):
        ``max_model_len`` counts the prompt and response, ``max_response_len`` (None: no such
        limit) the response alone."""
        context = max_model_len - len(self.input_ids)
        if max_response_len is None:
            return context, "max_model_len"
        response = max_response_len - len(self.response_ids)
        return (context, "max_model_len") if context <= response else (response, "max_response_len")

    def append_sampled(self, ids: list[int], logprobs: list[float], version: int = 0) -> None:
        """Append tokens the engine sampled (trained on) with policy ``version``."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        self._append(ids, 1, logprobs, int(version))

    def append_observation(self, ids: list[int]) -> None:
        """Append tokens the model did not produce (tool output, the template's text between turns): not trained on."""
        self._append(ids, 0, [0.0] * len(ids), -1)

    def _append(self, ids: list[int], mask: int, logprobs: list[float], version: int) -> None:
        self.response_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([mask] * len(ids))
        self.rollout_logprobs.extend(float(x) for x in logprobs)
        self.turn_ids.extend([self.num_turns] * len(ids))
        self.policy_versions.extend([version] * len(ids))

    @property
    def sampled_versions(self) -> list[int]:
        """The policy versions of the sampled tokens (those with loss mask 1), every segment's."""
        return [
            v for s in self.segments
            for v, m in zip(s.policy_versions, s.loss_mask, strict=True) if m
        ]

    def mask_all_but_last_turn(self) -> None:
        """Keep loss mask 1 only on the chain's last assistant turn (``train_on_last_turn=True``)."""
        sampled_turns = [
            t for s in self.segments for t, m in zip(s.turn_ids, s.loss_mask, strict=True) if m
        ]
        if not sampled_turns:
            return
        last = max(sampled_turns)
        for s in self.segments:
            s.loss_mask = [m if t == last else 0 for t, m in zip(s.turn_ids, s.loss_mask, strict=True)]

    @property
    def input_ids(self) -> list[int]:
        """Prompt then response: (P + R,)."""
        return self.prompt_ids + self.response_ids

    @property
    def num_tool_calls(self) -> int:
        return len(self.tool_calls)

