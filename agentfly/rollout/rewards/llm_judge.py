"""AgentFly's two LLM-as-judge rewards, asking an OpenAI-compatible chat server.

``llm_as_judge_math_reward`` (AgentFly's ``rewards/llm_as_judge/llm_as_judge_client.py``) sends
its math prompt (:data:`MATH_PROMPT`) with the chain's answer as ``reference_answer`` and the
row's ``answer`` as ``golden_answer``, and reads the verdict ``{"score": 1.0}`` or
``{"score": 0.0}`` (:func:`math_verdict`). ``llm_as_judge_reward``
(``rewards/llm_as_judge/llm_as_judge_reward.py``) sends its grading prompt
(:data:`ANSWER_PROMPT`) with the row's ``golden_answer`` and reads the number after the last
``Score:``, clamped to [0, 1] (:func:`score_verdict`).

Where the server is comes from the run's settings
(``agent.init_config.reward_config.<reward>``, :class:`JudgeSettings`; bound by
:mod:`agentfly.rollout.rewards.reward_config`). Departures from AgentFly:

- AgentFly's math judge asks a server fixed in its code (``10.24.0.80:8000``, key
  ``token-abc123``, ``Qwen/Qwen2.5-72B-Instruct``); ``llm_as_judge_reward`` calls an
  ``llm_backend.generate(prompt)`` its caller passes. Here both ask the configured server, the
  prompt as the one user message (``llm_as_judge_reward``'s prompt ends in ``Score:`` for a
  completion model; a chat model answers it as a question).
- AgentFly scores 0 when the server is unreachable, times out, or its verdict does not parse;
  here each is a failed reward of that chain (a :class:`RewardError` of kind
  ``judge_unreachable``, ``judge_timeout``, ``judge_error`` for an HTTP error status, or
  ``unparseable_verdict``), which is no verdict on the response. A non-finite ``Score:`` does
  not parse (AgentFly's clamp scores ``nan`` 1.0).
- One call, no retries (AgentFly's client retries twice, the ``openai`` default): a failed
  chain is re-run or dropped by ``algorithm.failed_chains``. No concurrency cap per server
  (AgentFly's ``RateLimiter``, 10 calls): the chains in flight bound the calls.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
from dataclasses import dataclass

from agentfly.rollout.rewards.registry import reward
from agentfly.rollout.rewards.result import RewardError

#: AgentFly's ``SystemPromptMath``, word for word (``llm_as_judge_client.py``)
MATH_PROMPT = """You are a math judge. Your task is to determine whether the *reference answer* is mathematically equivalent to the *golden answer*. The answers may be expressed in different formats, including LaTeX, decimal numbers, fractions, or expressions. Do not rely on string matching—evaluate whether the two answers represent the same mathematical value.

If they are mathematically equivalent, output 1.0. If not, output 0.0.

reference_answer = {reference_answer}
golden_answer = {golden_answer}

Output the result in the following JSON format:
{{"score": 1.0}} or {{"score": 0.0}}
"""

#: AgentFly's ``llm_as_judge_reward`` prompt, word for word (``llm_as_judge_reward.py``)
ANSWER_PROMPT = """You are an expert judge evaluating the quality of an answer.
Please evaluate the following answer based on its correctness, completeness, and alignment with the expected answer.

Expected Answer: {golden_answer}
Given Answer: {prediction}

Please provide a score from 0.0 to 1.0, where:
- 1.0: Perfect match or equivalent answer
- 0.7-0.9: Mostly correct with minor issues
- 0.4-0.6: Partially correct
- 0.0-0.3: Incorrect or irrelevant

Score:"""

#: AgentFly's ``extract_score`` pattern: only the two verdicts its prompt offers
MATH_VERDICT = re.compile(r'\{\s*"score"\s*:\s*(0\.0|1\.0)\s*\}')
#: the prompt's own line offering both verdicts, which a judge may echo: no verdict
MATH_CHOICES = re.compile(MATH_VERDICT.pattern + r"\s*or\s*" + MATH_VERDICT.pattern)

#: the key sent when ``api_key_env`` is unset (a vLLM server started without ``--api-key``
#: accepts any)
NO_KEY = "EMPTY"


@dataclass(frozen=True)
class JudgeSettings:
    """Where a judge reward asks: ``agent.init_config.reward_config.<reward>.<setting>``.

    Attributes:
        base_url: the OpenAI-compatible server's API root, e.g. ``http://host:8000/v1``
            (AgentFly's: ``http://10.24.0.80:8000/v1``).
        model: the model the server serves (AgentFly's: ``Qwen/Qwen2.5-72B-Instruct``).
        api_key_env: the environment variable holding the server's API key; None sends
            ``EMPTY``.
        timeout: seconds one judge call may take (AgentFly's: 30); past it the chain's reward
            fails as ``judge_timeout``. The reward call's own deadline
            (``agent.init_config.reward_timeout``, 60 s unless set) still bounds it.
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in ("base_url", "model"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if self.api_key_env is not None and not isinstance(self.api_key_env, str):
            raise ValueError(
                f"api_key_env must name an environment variable, got {self.api_key_env!r}"
            )
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float):
            raise ValueError(f"timeout must be a number of seconds, got {self.timeout!r}")
        if not math.isfinite(self.timeout) or not self.timeout > 0:
            raise ValueError(f"timeout must be positive, got {self.timeout!r}")

    def api_key(self) -> str:
        """The key to send: ``api_key_env``'s value, else :data:`NO_KEY`.

        Raises:
            RewardError: (kind ``judge_unconfigured``) ``api_key_env`` names an unset variable.
        """
        if self.api_key_env is None:
            return NO_KEY
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RewardError(
                "judge_unconfigured", f"the judge's API key variable {self.api_key_env} is not set"
            )
        return key


def math_verdict(text: str) -> float:
    """The math judge's score: the last ``{"score": 1.0}`` or ``{"score": 0.0}`` in ``text``
    (a judge reasons, then answers), the prompt's ``{"score": 1.0} or {"score": 0.0}`` line left
    out wherever the judge echoes it: an echo is no verdict. AgentFly's ``extract_score`` takes
    the first match, so an echoed prompt scores 1.0 there.

    Raises:
        RewardError: (kind ``unparseable_verdict``) no such verdict in ``text``.
    """
    verdicts = MATH_VERDICT.findall(MATH_CHOICES.sub(" ", text))
    if not verdicts:
        raise RewardError(
            "unparseable_verdict",
            f'no {{"score": 1.0 or 0.0}} in the judge\'s answer {text!r:.200}',
        )
    return float(verdicts[-1])


def score_verdict(text: str) -> float:
    """The grading judge's score: the number after the last ``Score:`` (all of ``text`` when it
    has none), clamped to [0, 1].

    Raises:
        RewardError: (kind ``unparseable_verdict``) that text is no finite number.
    """
    tail = text.split("Score:")[-1].strip()
    try:
        score = float(tail)
    except ValueError:
        score = math.nan
    if not math.isfinite(score):
        raise RewardError(
            "unparseable_verdict", f"no score after 'Score:' in the judge's answer {text!r:.200}"
        )
    return max(0.0, min(1.0, score))


async def ask_judge(settings: JudgeSettings, prompt: str) -> str:
    """The judge's answer to ``prompt``, sent as the one user message; within ``settings.timeout``.

    Raises:
        RewardError: kind ``judge_timeout`` (no answer in time), ``judge_unreachable`` (no
            connection), ``judge_error`` (an HTTP error status), ``unparseable_verdict`` (an
            answer without text), ``judge_unconfigured`` (the API key variable unset or the
            ``openai`` package missing).
    """
    try:
        from openai import APIConnectionError, APIStatusError, APITimeoutError, AsyncOpenAI
    except ImportError as e:
        raise RewardError(
            "judge_unconfigured",
            f"the judge client needs the openai package ({e}); pip install 'agentfly[judge]'",
        ) from e
    where = f"judge {settings.model!r} at {settings.base_url}"
    client = AsyncOpenAI(
        base_url=settings.base_url,
        api_key=settings.api_key(),
        timeout=settings.timeout,
        max_retries=0,
    )
    try:
        request = client.chat.completions.create(
            model=settings.model, messages=[{"role": "user", "content": prompt}]
        )
        # the client's timeout bounds each read; this bounds the whole call
        response = await asyncio.wait_for(request, settings.timeout)
    except (APITimeoutError, TimeoutError, asyncio.TimeoutError) as e:
        raise RewardError(
            "judge_timeout", f"{where} did not answer within {settings.timeout:g} s"
        ) from e
    except APIConnectionError as e:
        raise RewardError("judge_unreachable", f"{where} is unreachable: {e.__cause__ or e}") from e
    except APIStatusError as e:
        raise RewardError(
            "judge_error", f"{where} answered HTTP {e.status_code}: {e.message:.200}"
        ) from e
    finally:
        await client.close()
    content = response.choices[0].message.content if response.choices else None
    if not content:
        raise RewardError("unparseable_verdict", f"{where} answered no text")
    return content


def not_configured(name: str) -> RewardError:
    """The error of a judge reward called without its settings (a run binds them)."""
    return RewardError(
        "judge_unconfigured",
        f"reward {name!r} has no judge service: set agent.init_config.reward_config.{name}.base_url "
        f"and .model",
    )


async def judge_math(
    settings: JudgeSettings | None, prediction: str, answer: str
) -> dict[str, float]:
    """``llm_as_judge_math_reward`` asking the judge ``settings`` names."""
    if settings is None:
        raise not_configured("llm_as_judge_math_reward")
    prompt = MATH_PROMPT.format(reference_answer=prediction, golden_answer=answer)
    return {"reward": math_verdict(await ask_judge(settings, prompt))}


async def judge_answer(
    settings: JudgeSettings | None, prediction: str, golden_answer: str
) -> dict[str, float]:
    """``llm_as_judge_reward`` asking the judge ``settings`` names."""
    if settings is None:
        raise not_configured("llm_as_judge_reward")
    prompt = ANSWER_PROMPT.format(golden_answer=golden_answer, prediction=prediction)
    score = score_verdict(await ask_judge(settings, prompt))
    return {"reward": score, "raw_score": score}


@reward(name="llm_as_judge_math_reward", io_bound=True)
async def llm_as_judge_math_reward(prediction: str, answer: str) -> dict[str, float]:
    """1.0 when the judge finds the response equal in value to the row's ``answer``, else 0.0.

    Registered without settings (a call fails as ``judge_unconfigured``); a run calls the copy
    bound to ``agent.init_config.reward_config.llm_as_judge_math_reward``.
    """
    return await judge_math(None, prediction, answer)


@reward(name="llm_as_judge_reward", io_bound=True)
async def llm_as_judge_reward(prediction: str, golden_answer: str) -> dict[str, float]:
    """The judge's grade in [0, 1] of the response against the row's ``golden_answer``.

    Registered without settings (a call fails as ``judge_unconfigured``); a run calls the copy
    bound to ``agent.init_config.reward_config.llm_as_judge_reward``.
    """
    return await judge_answer(None, prediction, golden_answer)


#: each LLM judge reward's implementation, taking its :class:`JudgeSettings` first
JUDGES = {"llm_as_judge_math_reward": judge_math, "llm_as_judge_reward": judge_answer}
