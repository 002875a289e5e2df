"""AgentFly's LLM judges against a fake OpenAI-compatible server on 127.0.0.1: the verdict
becomes the score, the request carries AgentFly's prompt, and a judge that is unreachable, never
answers, errs or answers nonsense fails that chain's reward only, within its timeout."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentfly.rollout.rewards import acompute_reward, compute_reward
from agentfly.rollout.rewards.reward_config import RewardConfigError, configure_reward

MATH = "llm_as_judge_math_reward"
GRADE = "llm_as_judge_reward"


class FakeJudge(ThreadingHTTPServer):
    """Answers every chat completion with ``verdicts[prediction]`` (else ``verdict``), found
    by the prediction the prompt quotes; records each request's body and headers (lower-cased)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.verdict = '{"score": 1.0}'
        self.verdicts: dict[str, str] = {}
        self.status = 200
        self.requests: list[tuple[dict, dict]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, prompt: str) -> str:
        for prediction, verdict in self.verdicts.items():
            if f"reference_answer = {prediction}\n" in prompt or f"Given Answer: {prediction}\n" in prompt:
                return verdict
        return self.verdict


class _Handler(BaseHTTPRequestHandler):
    server: FakeJudge

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((body, {k.lower(): v for k, v in self.headers.items()}))
        content = self.server.answer(body["messages"][0]["content"])
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
        if self.server.status != 200:
            reply = {"error": {"message": "the judge fell over", "type": "server_error"}}
        data = json.dumps(reply).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def judge() -> Iterator[FakeJudge]:
    server = FakeJudge()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def bound(name: str, base_url: str, **settings):
    return configure_reward(name, {name: {"base_url": base_url, "model": "judge-7b", **settings}})


def score(fn, prediction: str, **row):
    return compute_reward(fn, prediction, row=row)


def test_the_math_judge_s_verdict_is_the_score(judge):
    fn = bound(MATH, judge.base_url)
    judge.verdict = 'The two are equal.\n{"score": 1.0}'
    right = score(fn, "\\frac{1}{2}", answer="0.5")
    judge.verdict = '{ "score" : 0.0 }'
    wrong = score(fn, "0.7", answer="0.5")
    assert (right.reward, right.failed) == (1.0, False)
    assert (wrong.reward, wrong.failed) == (0.0, False)
    # a judge that echoes the prompt's format line, then answers: its answer, not the echo's first
    judge.verdict = 'The format is {"score": 1.0} or {"score": 0.0}. They differ.\n{"score": 0.0}'
    echoed = score(fn, "0.7", answer="0.5")
    assert (echoed.reward, echoed.failed) == (0.0, False)


def test_the_math_judge_is_asked_agentfly_s_prompt(judge, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "token-abc123")
    score(bound(MATH, judge.base_url, api_key_env="JUDGE_KEY"), "x = 42", answer="42")
    (body, headers), = judge.requests
    assert body["model"] == "judge-7b" and len(body["messages"]) == 1
    assert body["messages"][0]["role"] == "user"
    prompt = body["messages"][0]["content"]
    # AgentFly's SystemPromptMath: the response is the reference answer, the row's the golden
    assert prompt.startswith("You are a math judge. Your task is to determine whether the *reference answer*")
    assert "\nreference_answer = x = 42\ngolden_answer = 42\n" in prompt
    assert prompt.endswith('{"score": 1.0} or {"score": 0.0}\n')
    assert headers["authorization"] == "Bearer token-abc123"


def test_the_grading_judge_reads_the_number_after_score_clamped(judge):
    fn = bound(GRADE, judge.base_url)
    judge.verdicts = {"close": "Score: 0.8", "great": "1.7", "bad": "Reasoning...\nScore: -2"}
    results = {p: score(fn, p, golden_answer="Paris") for p in judge.verdicts}
    assert {p: r.reward for p, r in results.items()} == {"close": 0.8, "great": 1.0, "bad": 0.0}
    assert results["close"].extras == {"raw_score": 0.8}
    prompt = judge.requests[0][0]["messages"][0]["content"]
    assert prompt.startswith("You are an expert judge evaluating the quality of an answer.")
    assert "\nExpected Answer: Paris\nGiven Answer: close\n" in prompt and prompt.endswith("Score:")


@pytest.mark.parametrize(
    "name, verdict, row",
    [
        (MATH, "They are equal, so 1.", {"answer": "1"}),
        (MATH, '{"score": 0.5}', {"answer": "1"}),  # AgentFly's verdicts are 1.0 and 0.0 only
        (MATH, 'Output {"score": 1.0} or {"score": 0.0}', {"answer": "1"}),  # the echo alone
        (GRADE, "Score: excellent", {"golden_answer": "1"}),
        (GRADE, "Score: nan", {"golden_answer": "1"}),
    ],
)
def test_a_verdict_that_does_not_parse_fails_the_reward(judge, name, verdict, row):
    judge.verdict = verdict
    result = score(bound(name, judge.base_url), "1", **row)
    assert (result.failed, result.kind, result.reward) == (True, "unparseable_verdict", 0.0)
    assert repr(verdict)[:20] in result.error


def test_one_chain_s_nonsense_verdict_fails_that_chain_only(judge):
    fn = bound(MATH, judge.base_url)
    judge.verdicts = {"5": '{"score": 1.0}', "6": '{"score": 0.0}', "7": "I cannot judge this."}

    async def three_chains():
        return await asyncio.gather(*(acompute_reward(fn, p, row={"answer": "5"}) for p in "567"))

    results = asyncio.run(three_chains())
    assert [(r.reward, r.failed, r.kind) for r in results] == [
        (1.0, False, None),
        (0.0, False, None),
        (0.0, True, "unparseable_verdict"),
    ]


def test_an_unreachable_judge_fails_the_reward_at_once():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    result = score(bound(MATH, f"http://127.0.0.1:{port}/v1", timeout=5), "1", answer="1")
    assert (result.failed, result.kind) == (True, "judge_unreachable")
    assert f"127.0.0.1:{port}" in result.error and time.monotonic() - start < 4


def test_a_judge_that_never_answers_fails_the_reward_at_its_timeout():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        start = time.monotonic()
        result = score(bound(MATH, url, timeout=1), "1", answer="1")
        elapsed = time.monotonic() - start
    assert (result.failed, result.kind) == (True, "judge_timeout")
    assert "did not answer within 1 s" in result.error
    assert 0.9 < elapsed < 4


def test_an_http_error_fails_the_reward_naming_the_status(judge):
    judge.status = 500
    result = score(bound(MATH, judge.base_url), "1", answer="1")
    assert (result.failed, result.kind) == (True, "judge_error") and "HTTP 500" in result.error


def test_a_judge_called_without_settings_names_the_keys():
    result = score(MATH, "1", answer="1")
    assert (result.failed, result.kind) == (True, "judge_unconfigured")
    assert f"agent.init_config.reward_config.{MATH}.base_url" in result.error


def test_binding_refuses_what_the_config_check_refuses():
    assert configure_reward("math_equal_reward", {}) == "math_equal_reward"
    with pytest.raises(RewardConfigError, match=f"reward_config.{GRADE}.model"):
        configure_reward(GRADE, {GRADE: {"base_url": "http://127.0.0.1:1/v1"}})


@pytest.mark.slow
def test_a_rollout_scores_its_chains_with_the_configured_judge(judge, model_dir, tmp_path, capsys):
    """``agentfly rollout`` end to end: the run binds the judge to its server."""
    from agentfly.cli import main

    data = tmp_path / "train.json"
    rows = [{"question": "2+3?", "answer": "5"}, {"question": "4*4?", "answer": "16"}]
    data.write_text(json.dumps(rows))
    out = tmp_path / "out.jsonl"
    judge.verdict = '{"score": 1.0}'
    args = [
        "rollout",
        f"data.train_files={data}",
        f"agent.init_config.model_name_or_path={model_dir}",
        "agent.init_config.template=qwen2.5",
        f"agent.init_config.reward_name={MATH}",
        f"agent.init_config.reward_config.{MATH}.base_url={judge.base_url}",
        f"agent.init_config.reward_config.{MATH}.model=judge-7b",
        "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=4",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.num_engines=0",
        f"--output={out}",
    ]
    assert main(args) == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in records] == [1.0, 1.0]
    prompts = [body["messages"][0]["content"] for body, _ in judge.requests]
    assert sorted(p.split("golden_answer = ")[1].split("\n")[0] for p in prompts) == ["16", "5"]


def test_a_judge_without_the_openai_package_is_refused_naming_the_extra(monkeypatch):
    from agentfly.rollout.rewards import reward_config

    real = reward_config.importlib.util.find_spec
    monkeypatch.setattr(
        reward_config.importlib.util, "find_spec", lambda n, *a: None if n == "openai" else real(n, *a)
    )
    server = {MATH: {"base_url": "http://127.0.0.1:1/v1", "model": "judge-7b"}}
    (problem,) = reward_config.reward_config_errors(MATH, server)
    assert "needs the openai package: pip install 'agentfly[judge]'" in problem
