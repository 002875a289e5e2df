"""``agent.harness``: the user's own program runs each chain against an endpoint of its own, and
the chain trains on exactly what the engine was given and sampled.

The parity test runs the example program (examples/harness/calculator_agent.py, no agentfly
import) on the demo model and compares it with the built-in ``hermes`` loop on the same rows and
seeds; the others run programs of tests/rollout/harness_programs.py on a recording engine."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest
from omegaconf import OmegaConf

from agentfly.core.errors import ConfigError
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.engines.base import GenerationOutput
from agentfly.rollout.harness import Harness, HarnessLoop
from agentfly.rollout.templates import get_template
from tests.rollout.scripted_loops import assert_segment_is_what_the_engine_sampled

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "harness" / "calculator_agent.py"
PROGRAMS = "tests.rollout.harness_programs"


class RecordingEngine:
    """Answers every request ``reply <k>`` (call ``k``), recording what it was given and
    sampled; call ``k`` reports log-probability ``-(k + 1) / 10`` and weights version ``k``.
    Each call takes ``delay`` seconds; the attempts numbered in ``stall`` (0-based, every
    request counted) never answer, and what they were given goes to ``stalled``."""

    def __init__(self, tokenizer, delay=0.0, stall=()):
        self.tokenizer, self.calls = tokenizer, []
        self.delay, self.stall, self.stalled, self.attempts = delay, set(stall), [], 0

    async def generate(self, prompts, sampling):
        import asyncio

        (prompt,) = prompts
        self.attempts += 1
        if self.attempts - 1 in self.stall:
            self.stalled.append(list(prompt))
            await asyncio.sleep(3600)  # past the request's deadline: cancelled there
        await asyncio.sleep(self.delay)
        k = len(self.calls)
        ids = self.tokenizer.encode(f"reply {k}<|im_end|>", add_special_tokens=False)
        self.calls.append((list(prompt), ids))
        return [[GenerationOutput(ids, [-(k + 1) / 10] * len(ids), "stop", weights_version=k)]]


def recording_loop(model_dir, harness, engine_kw=None, **kw):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    engine = RecordingEngine(tok, **(engine_kw or {}))
    loop = HarnessLoop(engine=engine, tokenizer=tok, template=get_template("qwen2.5"),
                       agent=get_agent("hermes", []), harness=harness, max_model_len=512, **kw)
    return loop, engine


# ---------------------------------------------------------------------- parity with the built-in loop


@pytest.fixture(scope="module")
def demo_pool():
    from agentfly.rollout.engines import EnginePool

    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(REPO / "agentfly/demo/model"),
                                                        "device": "cpu", "seed": 0})
    yield pool
    pool.shutdown()


def demo_loops(pool, harness, **kw):
    from agentfly.rollout.tools.bind import bind_tools

    tok = pool.tokenizer
    common = dict(engine=pool, tokenizer=tok, template=get_template("qwen2.5-no-system-tool", tok),
                  reward="math_equal_reward_tool", max_turns=3, max_tokens=24, max_model_len=80, **kw)
    builtin = AgentLoop(agent=get_agent("hermes", bind_tools(["calculator", "answer"], {})), **common)
    return builtin, HarnessLoop(agent=get_agent("hermes", []), harness=harness, **common)


def assert_same_chains(builtin, harnessed):
    assert len(builtin) == len(harnessed)
    for a, b in zip(builtin, harnessed, strict=True):
        assert b.finish_reason != "error", b.error
        assert b.prompt_ids == a.prompt_ids
        assert b.response_ids == a.response_ids
        assert b.loss_mask == a.loss_mask
        # the same ids sampled in another batch composition: fp32 sums in another order
        assert max(abs(x - y) for x, y in zip(a.rollout_logprobs, b.rollout_logprobs, strict=True)) < 1e-5
        assert b.final_response == a.final_response and b.reward == a.reward
        assert [c.name for c in b.tool_calls] == [c.name for c in a.tool_calls]
        assert b.num_turns == a.num_turns and b.harness["breaks"] == b.harness["malformed"] == 0
        assert b.harness["requests"] >= b.num_turns  # and one refused where a limit was reached
    assert any(0 in t.loss_mask for t in harnessed)  # tool results between turns, not trained on


def test_the_example_program_as_a_command_samples_what_the_builtin_hermes_loop_does_greedy(demo_pool):
    rows = json.loads((REPO / "agentfly/demo/data/val.json").read_text())[:6]
    builtin, harnessed = demo_loops(demo_pool, Harness(command=f"{sys.executable} {EXAMPLE}"))
    assert_same_chains(builtin.run(rows, greedy=True), harnessed.run(rows, greedy=True))


def test_the_example_program_as_a_function_samples_what_the_builtin_loop_does_seeded(demo_pool):
    rows = json.loads((REPO / "agentfly/demo/data/val.json").read_text())[6:14]
    builtin, harnessed = demo_loops(demo_pool, Harness(function=f"{EXAMPLE}:solve"),
                                    num_chains=2, temperature=1.0, seed=7)
    b, h = builtin.run(rows), harnessed.run(rows)
    assert_same_chains(b, h)
    assert len({tuple(t.response_ids) for t in h}) > 1  # sampled, not all alike


@pytest.mark.slow
def test_the_example_program_samples_what_the_builtin_loop_does_on_vllm(tmp_path_factory):
    """The same comparison on the vLLM engine (its CPU build runs the demo model: head_dim 32)."""
    pytest.importorskip("vllm")
    from agentfly.rollout.engines import EnginePool

    rows = json.loads((REPO / "agentfly/demo/data/val.json").read_text())[:8]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm_cache")))
        mp.setenv("VLLM_CONFIGURE_LOGGING", "0")
        pool = EnginePool("vllm", 0, engine_kwargs={
            "model": str(REPO / "agentfly/demo/model"), "dtype": "float32", "max_model_len": 256,
            "seed": 0, "max_num_seqs": 16, "weights_dir": str(tmp_path_factory.mktemp("vllm_weights"))})
        try:
            builtin, harnessed = demo_loops(pool, Harness(function=f"{EXAMPLE}:solve"))
            assert_same_chains(builtin.run(rows, greedy=True), harnessed.run(rows, greedy=True))
        finally:
            pool.shutdown()


# ---------------------------------------------------------------------- a history rewritten


@pytest.fixture(scope="module")
def rewritten(model_dir):
    loop, engine = recording_loop(model_dir, Harness(function=f"{PROGRAMS}:by_mode"), max_turns=6,
                                  reward=lambda prediction, **_: 1.0)
    (traj,) = loop.run([{"question": "What is 12*34?", "answer": "408", "mode": "rewrite"}])
    return loop, engine, traj


def test_a_rewritten_history_starts_a_segment_each_time(rewritten):
    _, engine, traj = rewritten
    assert traj.finish_reason == "answer", traj.error
    assert len(engine.calls) == 5 and traj.num_turns == 5
    assert len(traj.segments) == 3 and traj.harness == {"requests": 5, "breaks": 2, "malformed": 0}
    assert [sorted(set(s.turn_ids)) for s in traj.segments] == [[0, 1], [2, 3], [4]]


def test_every_training_token_is_what_the_engine_was_given_and_sampled(rewritten):
    _, engine, traj = rewritten
    for segment, calls in zip(traj.segments, [(0, 1), (2, 3), (4,)], strict=True):
        assert engine.calls[calls[0]][0] == segment.prompt_ids  # its first call saw its prompt alone
        for k in calls:  # every call saw the segment so far
            assert segment.input_ids[: len(engine.calls[k][0])] == engine.calls[k][0]
        assert_segment_is_what_the_engine_sampled(segment, engine.calls, calls)


def test_each_segment_trains_with_the_chain_s_reward(rewritten):
    _, _, traj = rewritten
    batch = collate_trajectories([traj], pad_id=0)
    assert len(batch) == 3 and batch.index.tolist() == [0, 0, 0]
    assert batch.token_level_scores.sum(-1).tolist() == [1.0, 1.0, 1.0]


def test_two_completions_sent_at_once_each_train_after_what_they_were_sampled_from(model_dir):
    # the engine takes 0.2 s a call, so both requests are in the server at once; the second is
    # answered after the first is recorded and, not extending it, is a segment of its own
    loop, engine = recording_loop(model_dir, Harness(function=f"{PROGRAMS}:by_mode"), max_turns=4,
                                  engine_kw={"delay": 0.2}, reward=lambda prediction, **_: 1.0)
    (traj,) = loop.run([{"question": "What is 12*34?", "mode": "gather"}])
    assert traj.finish_reason == "answer", traj.error
    assert sorted(traj.final_response.split(" | ")) == ["reply 0", "reply 1"] and len(engine.calls) == 2
    assert engine.calls[0][0] == engine.calls[1][0]  # both sampled from the prompt alone
    assert len(traj.segments) == 2 and traj.harness["breaks"] == 1
    for segment, k in zip(traj.segments, (0, 1), strict=True):
        assert_segment_is_what_the_engine_sampled(segment, engine.calls, (k,))
    batch = collate_trajectories([traj], pad_id=0)
    assert batch.response_mask.sum(-1).tolist() == [len(engine.calls[0][1]), len(engine.calls[1][1])]


def test_a_request_retried_after_a_504_is_recorded_as_if_sent_once(model_dir):
    # the program's second request (attempt 1) meets the engine's deadline: a 504, which the
    # openai SDK retries by itself; the record is what one request that succeeded makes
    loop, engine = recording_loop(model_dir, Harness(function=f"{PROGRAMS}:by_mode", request_timeout=1.0),
                                  max_turns=4, engine_kw={"stall": {1}}, reward=lambda prediction, **_: 1.0)
    (traj,) = loop.run([{"question": "What is 12*34?", "mode": "retry"}])
    assert traj.finish_reason == "answer", traj.error
    assert engine.attempts == 3 and len(engine.calls) == 2 and traj.final_response == "reply 1"
    assert engine.stalled == [engine.calls[1][0]]  # the retry was given what the first try was
    assert len(traj.segments) == 1 and traj.harness["breaks"] == 0 and traj.num_turns == 2
    assert_segment_is_what_the_engine_sampled(traj, engine.calls, (0, 1))
    assert traj.harness["requests"] == 3


# ---------------------------------------------------------------------- faults, each its chain's own


def test_a_program_that_fails_fails_its_chain_only_naming_what_it_did(model_dir):
    loop, _ = recording_loop(model_dir, Harness(function=f"{PROGRAMS}:by_mode", timeout=2.0), max_turns=3)
    modes = ["ok", "hang", "raise", "not_a_string", "silent", "malformed", "forever", "ok"]
    began = time.monotonic()
    trajs = loop.run([{"question": f"q{i}", "mode": m} for i, m in enumerate(modes)])
    assert time.monotonic() - began < 30  # the hung one waited for its own deadline only
    by_mode = dict(zip(modes[:-1], trajs, strict=False))
    assert trajs[0].finish_reason == trajs[-1].finish_reason == "answer"
    assert trajs[0].final_response.startswith("reply ")
    errors = {m: t.error for m, t in by_mode.items() if t.finish_reason == "error"}
    assert set(errors) == {"hang", "raise", "not_a_string", "silent", "malformed"}
    assert "did not return within 2 s" in errors["hang"]
    assert "raised ValueError: the program broke" in errors["raise"]
    assert "returned int" in errors["not_a_string"]
    assert "answered without asking the model" in errors["silent"]
    assert "malformed request" in errors["malformed"] and "tool_choice" in errors["malformed"]
    assert by_mode["malformed"].harness["malformed"] == 1
    # a limit reached ends the chain with that reason, whatever the program does next
    assert by_mode["forever"].finish_reason == "max_turns" and by_mode["forever"].num_turns == 3


def test_a_program_failure_the_config_calls_the_model_s_is_scored_0_in_its_group(model_dir):
    from agentfly.rollout.failures import FailedChainsError, complete_groups, failure_reason

    rows = [{"question": "q0", "mode": "ok"}, {"question": "q0", "mode": "raise"}]
    for failures, reason, kept in (("model", None, True), ("infrastructure", "chain_error", False)):
        loop, _ = recording_loop(model_dir, Harness(function=f"{PROGRAMS}:by_mode", failures=failures),
                                 max_turns=3, reward=lambda prediction, **_: 1.0)
        ok, failed = loop.run(rows)
        for t in (ok, failed):
            t.group_id = 0  # one group: the failure's sibling is judged beside it
        assert failure_reason(ok) is None and ok.reward == 1.0
        assert failure_reason(failed) == reason and "raised ValueError" in failed.error
        if failures == "model":  # no reward asked of an answer never given: 0, in the baseline
            assert failed.finish_reason == "program_failed" and failed.reward == 0.0
            assert sum(failed.loss_mask) > 0  # what it sampled before it failed is trained against
        if kept:
            assert len(complete_groups([ok, failed], "drop").trajectories) == 2
        else:  # its group is dropped: with no other group, nothing is left to train on
            with pytest.raises(FailedChainsError, match="chain_error"):
                complete_groups([ok, failed], "drop")
    with pytest.raises(ValueError, match="'infrastructure', 'model'"):
        Harness(function=f"{PROGRAMS}:by_mode", failures="mine")


def test_a_command_that_fails_fails_its_chain_only_and_leaves_no_process(model_dir, tmp_path):
    command = f"{sys.executable} -m {PROGRAMS}"
    # the deadline the hung program meets; the others (Python and openai's import, ~2 s here,
    # more on a loaded machine) finish well within it
    loop, _ = recording_loop(model_dir, Harness(command=command, timeout=20.0), max_turns=2)
    pid_file = tmp_path / "orphan.pid"
    modes = ["ok", "exit", "quiet", "orphan"]
    trajs = loop.run([{"question": f"q{i}", "mode": m, "pid_file": str(pid_file)} for i, m in enumerate(modes)])
    ok, exited, quiet, orphan = trajs
    assert ok.finish_reason == "answer" and ok.final_response.startswith("reply ")  # the last line
    assert exited.finish_reason == "error" and "exited with status 3: it went wrong" in exited.error
    assert quiet.finish_reason == "error" and "printed nothing" in quiet.error
    assert orphan.finish_reason == "error" and "did not finish within 20 s" in orphan.error
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the program's child outlived its chain"
        time.sleep(0.1)


@pytest.mark.needs_bwrap
def test_a_sandboxed_command_reaches_its_endpoint_and_nothing_else(model_dir, monkeypatch):
    monkeypatch.setenv("AGENTFLY_TEST_SECRET", "the trainer's")
    command = f"{sys.executable} -m {PROGRAMS}"
    loop, engine = recording_loop(model_dir, Harness(command=command, timeout=60.0, sandbox=True), max_turns=2)
    (traj,) = loop.run([{"question": "q", "mode": "probe"}])
    assert traj.finish_reason == "answer", traj.error
    seen = json.loads(traj.final_response)
    assert seen["reply"] == "reply 0" and len(engine.calls) == 1  # over the host's network
    assert seen["wrote_cwd"] is False  # the working directory is read-only
    assert not (REPO / "written-by-the-harness").exists()
    assert seen["secret"] is None  # only the endpoint's variables
    assert seen["processes"] < 10  # its own PID namespace
    if os.geteuid() == 0:
        assert seen["uid"] != 0  # a root trainer's sandbox drops to a uid of its own


# ---------------------------------------------------------------------- config


def compose(*overrides):
    from agentfly.cli import parse_config

    return parse_config(list(overrides), check_required=False, default_task=True)


@pytest.mark.parametrize("overrides, message", [
    (["agent.harness.command=./agent", f"agent.harness.function={EXAMPLE}:solve"], "both set"),
    ([f"agent.harness.function={EXAMPLE}:calculate"], "must be an async function"),
    (["agent.harness.function=no_such_module:f"], "cannot be imported"),
    (["agent.harness.command=./agent", "agent.init_config.tools=[calculator]"], "runs its own tools"),
    ([f"agent.harness.function={EXAMPLE}:solve", "agent.harness.sandbox=true"], "needs agent.harness.command"),
])
def test_a_harness_the_config_cannot_run_is_refused_at_compose_time(overrides, message):
    if "runs its own tools" not in message:
        overrides = [*overrides, "agent.init_config.tools=[]"]
    with pytest.raises(ConfigError, match=message):
        compose(*overrides)


def test_a_harness_needs_one_rank():
    from agentfly.run.plan import check_folding

    cfg = OmegaConf.create({"agent": {"init_config": {"tools": []},
                                      "harness": {"command": "true", "function": None}}})
    with pytest.raises(ConfigError, match=r"agent\.harness cannot run on 2 ranks"):
        check_folding(cfg, world_size=2)
    check_folding(cfg, world_size=1)


def test_the_harness_keys_reach_the_rollout_plan():
    from agentfly.run.plan import _harness

    cfg = compose("agent.init_config.tools=[]", f"agent.harness.function={EXAMPLE}:solve",
                  "agent.harness.timeout=7", "agent.harness.request_timeout=3", "agent.harness.failures=model")
    assert _harness(cfg) == {"command": None, "function": f"{EXAMPLE}:solve", "timeout": 7.0,
                             "request_timeout": 3.0, "sandbox": False, "failures": "model"}
    assert _harness(compose()) is None
    assert os.path.isabs(_harness(cfg)["function"].split(":")[0])


# ---------------------------------------------------------------------- agentfly fit


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_fit_trains_a_harness_program_in_each_rollout_mode(task, tmp_path, mode):
    from agentfly.cli import main
    from tests.fit_runs import fit_args, rows

    root, model = task
    run = tmp_path / "run"
    extra = ["agent.init_config.tools=[]", f"agent.harness.function={PROGRAMS}:by_mode",
             f"trainer.rollout_mode={mode}"]
    assert main(fit_args(root, model, run, 2, extra)) == 0
    metrics = [r for r in rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    # 2 prompts x 2 chains, one request each (the `ok` program), none broken or malformed
    assert [float(r["rollout/harness/requests"]) for r in metrics] == [4.0, 4.0]
    assert all(float(r["rollout/harness/breaks"]) == 0 for r in metrics)
    assert all(float(r["rollout/failures/chain"]) == 0 for r in metrics)
    assert (run / "hf_actor" / "model.safetensors").exists()


def test_agentfly_rollout_runs_the_harness_and_writes_its_counts(tmp_path, capsys):
    from agentfly.cli import main

    out = tmp_path / "chains.jsonl"
    assert main(["rollout", "--config", str(REPO / "conf/examples/demo_calculator.yaml"), "--limit", "2",
                 "-o", str(out), "agent.init_config.tools=[]", f"agent.harness.function={EXAMPLE}:solve",
                 "trainer.num_threads=1"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 16 and all(r["harness"]["requests"] >= 1 for r in records)  # 2 rows x 8 chains
    assert all(r["finish_reason"] != "error" for r in records)
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["harness/requests"] == sum(r["harness"]["requests"] for r in records)
