"""AgentFly's published training scripts (tests/config/agentfly_scripts.py) through `agentfly fit`
on this CPU: each script's words with only the model (a tiny local one), the data (small files
made here, in the rows its reward and environment read; the search tool's corpus among them),
the GPU counts (the engine in this process: `rollout.num_engines=0`), the batch sizes (1 prompt,
2 chains, 1 turn, 8 tokens), the run folder and the step counts (1 iteration, no validation, no
checkpoint) replaced, and `rollout.name=transformers` for vLLM. An empty value the script passes
(AgentFly's slip) stays empty.

- Trains one iteration, in this process, and writes its metrics: each script with a distinct
  agent type, template, tools, reward or environment (TRAINS).
- Composed and planned only, nothing loaded: the ScienceWorld and WebShop scripts whose agent,
  template, tools and reward are those of one that trains (COMPOSES); the whole module ran
  ~95 s on the shared 2-core machine, ~60 s of it the five fits (ScienceWorld's first, with its two
  JVMs and the imports, ~25 s).
- Composed and planned with the offline SWE task (agentfly.data.buggy_repos) and its reward in
  place of R2E-Gym's, and without the sequence parallelism and packing agentfly lacks: the SWE
  scripts, their agent types, parser and workspace tools as published (OFFLINE_SWE).
- Refused before anything loads (REFUSED): exit 2 and a message naming each missing thing (a
  name agentfly lacks, a package or game files not installed here, a judge service, an SWE
  image's reward, a vision model), no traceback; the script's ``missing`` entry says why, so
  the case moves to TRAINS when the name lands.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
from pathlib import Path

import pytest

from agentfly.cli import load_config, main
from agentfly.data.buggy_repos import make_task
from agentfly.models.tiny import build_tiny_model
from tests.config.agentfly_scripts import SCRIPTS
from tests.fit_runs import rows as metrics_rows
from tests.test_verl_commands import localize

BY_NAME = {s["script"]: s for s in SCRIPTS}
MODEL_KEYS = (
    "agent.init_config.model_name_or_path",
    "agent.model_name_or_path",
    "actor_rollout_ref.model.path",
    "critic.model.path",
)
CHAIN_KEYS = ("agent.num_chains", "agent.run_config.num_chains", "actor_rollout_ref.rollout.n")
TURN_KEYS = ("agent.max_turns", "agent.run_config.max_turns")
TOKEN_KEYS = ("agent.generation_config.max_tokens", "agent.run_config.generation_config.max_tokens")
PROMPTS, CHAINS = 1, 2


def tiny_args(script: dict, data: Path, run: Path, model: Path, extra=()) -> list[str]:
    """The script's words with the model, data, GPU counts, batch sizes, run folder and step
    counts replaced (an empty value, AgentFly's slip, is kept: it is the script's)."""
    given = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in script["args"]}
    replace = {k: str(model) for k in MODEL_KEYS}
    replace.update({k: str(CHAINS) for k in CHAIN_KEYS})
    replace.update({k: "1" for k in TURN_KEYS})
    replace.update({k: "8" for k in TOKEN_KEYS if given.get(k)})
    replace.update({
        "data.train_files": str(data), "data.val_files": str(data),
        "data.train_batch_size": str(PROMPTS), "data.val_batch_size": str(PROMPTS),
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(PROMPTS * CHAINS),
        "critic.ppo_mini_batch_size": str(PROMPTS * CHAINS),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "1",
        "critic.ppo_micro_batch_size_per_gpu": "1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "1",
        "trainer.n_gpus_per_node": "1", "trainer.nnodes": "1",
        "actor_rollout_ref.rollout.name": "transformers",
        "trainer.total_training_steps": "1", "trainer.save_freq": "-1", "trainer.test_freq": "-1",
        "trainer.val_before_train": "False",
    })
    more = [f"trainer.default_local_dir={run}", "actor_rollout_ref.rollout.num_engines=0", *extra]
    return localize(script["args"], replace, more)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A tiny model and a data file per row shape the scripts' rewards and environments read."""
    root = tmp_path_factory.mktemp("agentfly_scripts")
    model = build_tiny_model(root / "model", max_position_embeddings=4096)
    rows = {
        # GSM8K's: the reward reads the number after ####
        "math": [{"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=7\n#### 7"}],
        # NQ/HotpotQA's, as AgentFly's QA rewards read them
        "qa": [{"question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}],
        # ScienceWorld's: the environment resets to the task and variation
        "scienceworld": [{"question": "Find the animal that lives longest, then focus on it.",
                          "task_name": "lifespan-longest-lived", "variation_idx": 0}],
        # ALFWorld's: a game by task id (refused before any is looked up)
        "alfworld": [{"question": "put a clean mug in the coffeemachine.", "task_id": "trial_T20190909_000000_000000"}],
        # SWE's: an instance of R2E-Gym (refused before any image is looked for)
        "swe": [{"question": "Fix the bug.", "docker_image": "namanjain12/r2e-gym-lite:example"}],
        # the offline SWE task's: a small repository with a planted bug
        "swe_offline": [make_task(0)],
        # images and their questions (refused before any is read)
        "vision": [{"question": "Click the OK button.", "image": "screenshot.png", "answer": "OK"}],
    }
    files = {}
    for name, r in rows.items():
        files[name] = root / f"{name}.json"
        files[name].write_text(json.dumps(r))
    if importlib.util.find_spec("rapidfuzz"):  # WebShop's: a goal of the generated catalog
        from agentfly.envs.webshop import make_data

        files["webshop"] = root / "webshop.json"
        files["webshop"].write_text(json.dumps(make_data(root / "webshop", val=1)["train"][:PROMPTS]))
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in ["Hamlet was written by William Shakespeare.", "Paris is the capital of France."]))
    return model, files, corpus


# script -> (data, what the machine needs): each a distinct agent type, template, tools and reward
TRAINS = {
    "train_example.sh": ("math", ()),  # hermes (AgentFly's hf), the tokenizer's template, calculator
    "scienceworld/train_science_world.sh": ("scienceworld", ("scienceworld", "java")),  # action, env
    "search/train_search_r1.sh": ("qa", ("bm25s",)),  # searchr1, qwen3-think-no-tool, qa_em_reward
    "search/train_tool_call_ray.sh": ("qa", ("bm25s",)),  # hermes parser, [search,answer]
    "webshop/train_webshop.sh": ("webshop", ("rapidfuzz",)),  # action, WebShop's env and reward
}
# the same agent type, template, tools and reward as one that trains: composed and planned
COMPOSES = {
    "scienceworld/train_science_world.slurm": "scienceworld",
    "scienceworld/train_science_world_ray.sh": "scienceworld",
    "webshop/train_webshop.slurm": "webshop",
    "webshop/train_webshop_ray.sh": "webshop",
}
SWE_IMAGE = ["reward_name='r2e_gym_reward' is not supported", "R2E-Gym container image"]
# script -> (data, what agentfly's refusal names)
REFUSED = {
    "alfworld/train_alfworld.sh": ("alfworld", [
        "agent.run_config.generation_config.max_tokens", "invalid literal for int() with base 10: ''"]),
    # without the package "needs the alfworld package"; with it "no game files at ..."
    "alfworld/train_alfworld_ray.sh": ("alfworld", ["tool 'alfworld_step'", "alfworld-download"]),
    "run_gui_agent.sh": ("vision", [
        "agent.init_config.agent_type='gui': vision (GUI) agents are out of scope",
        "unknown reward 'gui_reward'", "unknown chat template 'qwen2.5-vl'",
        "unknown tool 'pyautogui_code_generator'"]),
    "scienceworld/train_science_world_qwen35_ray.slurm": ("scienceworld", [
        "ulysses_sequence_parallel_size=4 is not supported"]),
    "search/train_search_r1_ray.sh": ("qa", [
        "algorithm.adv_estimator='sspo_multiturn' is not supported", "commit 001f000"]),
    # its VLM_MODELS / VLM_SERVER_IPS configure the judges; agentfly has no client for them
    "simuscene/train_simuscene.slurm": ("math", [
        "reward_name='vlm_as_judge_pass_reward_multi_model' is not supported",
        "VLM_MODELS and VLM_SERVER_IPS are set (3 judge server(s))", "no client for a judge service"]),
    # the SWE agents, the qwen3_coder parser and the workspace tools exist: what stops them is the
    # reward's R2E-Gym image (and the sequence parallelism agentfly does not build)
    "swe/train_swe_r2e_gym.sh": ("swe", [
        *SWE_IMAGE, "unknown chat template ''",
        "ulysses_sequence_parallel_size=2 is not supported"]),
    "swe/train_swe_r2e_gym.slurm": ("swe", [
        *SWE_IMAGE, "ulysses_sequence_parallel_size=2 is not supported"]),
    "swe/train_swe_r2e_gym_tools.slurm": ("swe", [
        *SWE_IMAGE, "critic.ulysses_sequence_parallel_size=4 is not supported"]),
    "swe/train_swe_r2e_gym_tools_32B.slurm": ("swe", [
        *SWE_IMAGE, "ulysses_sequence_parallel_size=4 is not supported"]),
    "vqa/run_vlm_qa.sh": ("vision", [
        "unknown reward 'infoseek_reward'", "unknown chat template 'qwen2.5-vl'",
        "tool 'async_dense_retrieve' needs the setting(s) index_path, corpus_path, encoder_path"]),
}


def test_every_script_has_one_outcome():
    assert sorted(TRAINS.keys() | COMPOSES.keys() | REFUSED.keys()) == sorted(BY_NAME)
    assert not TRAINS.keys() & COMPOSES.keys() and not REFUSED.keys() & (TRAINS.keys() | COMPOSES.keys())
    for name, script in BY_NAME.items():  # a refused script says why in the data; no other does
        assert bool(script["missing"]) == (name in REFUSED), name


def with_env(monkeypatch, tmp_path, script):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the scripts log to wandb
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    for k, v in script["env"].items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("name", sorted(TRAINS))
def test_script_trains_one_iteration(local, tmp_path, monkeypatch, name):
    model, files, corpus = local
    data, needs = TRAINS[name]
    for need in needs:
        if need == "java":
            if shutil.which("java") is None:
                pytest.skip("needs a Java runtime for ScienceWorld")
        else:
            pytest.importorskip(need, reason=f"needs the {need} package")
    script = BY_NAME[name]
    with_env(monkeypatch, tmp_path, script)
    # the search tool's corpus is data made here
    extra = [f"agent.init_config.tool_config.search.corpus_path={corpus}"] if data == "qa" else []
    run = tmp_path / "run"
    assert main(["train", *tiny_args(script, files[data], run, model, extra)]) == 0
    iterations = [float(r["training/iteration"]) for r in metrics_rows(run) if r.get("training/iteration")]
    assert iterations == [1.0]


@pytest.mark.parametrize("name", sorted(COMPOSES))
def test_script_composes_and_plans(local, tmp_path, name):
    from agentfly.run.plan import plan_run
    from agentfly.run.topology import Hardware

    model, files, _ = local
    if COMPOSES[name] not in files:
        pytest.skip("needs the rapidfuzz package for WebShop's catalog")
    script = BY_NAME[name]
    with warnings.catch_warnings():  # the settings a CPU run leaves unused are named: not checked here
        warnings.simplefilter("ignore")
        cfg = load_config(tiny_args(script, files[COMPOSES[name]], tmp_path / "run", model))
    given = dict(a.split("=", 1) for a in script["args"])
    init = cfg.agent.init_config
    assert (init.agent_type, init.template, init.reward_name, list(init.tools)) == (
        given["agent.init_config.agent_type"], given["agent.init_config.template"],
        given["agent.init_config.reward_name"], given["agent.init_config.tools"].strip("[]").split(","))
    assert init.system_prompt == given["agent.init_config.system_prompt"].strip('"')
    plan = plan_run(cfg, Hardware(gpus=0, cpus=2))
    assert plan.iterations == 1 and plan.engine_name == "transformers"
    assert not (tmp_path / "run").exists()  # nothing loaded or written


# what the SWE scripts need that cannot be here, replaced: the offline task's reward for R2E-Gym's,
# no sequence parallelism (and a template where the script gives none)
OFFLINE_SWE = {
    "agent.init_config.reward_name": "swe_test_reward",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": "1",
    "critic.ulysses_sequence_parallel_size": "1",
}


@pytest.mark.parametrize("name", sorted(n for n in REFUSED if n.startswith("swe/")))
def test_swe_script_composes_and_plans_on_the_offline_task(local, tmp_path, name):
    """The SWE scripts' agent type, parser and workspace tools as published, with the offline
    task's reward in place of R2E-Gym's: composed and planned, nothing loaded."""
    from agentfly.run.plan import plan_run
    from agentfly.run.topology import Hardware

    model, files, _ = local
    script = BY_NAME[name]
    given = dict(a.split("=", 1) for a in script["args"])
    offline = {**OFFLINE_SWE, "agent.init_config.template": given.get("agent.init_config.template") or "qwen-xml-think"}
    args = localize(tiny_args(script, files["swe_offline"], tmp_path / "run", model), offline, [])
    with warnings.catch_warnings():  # the settings a CPU run leaves unused are named: not checked here
        warnings.simplefilter("ignore")
        cfg = load_config(args)
    init = cfg.agent.init_config
    assert (init.agent_type, init.tool_parser_name, list(init.tools), init.reward_name) == (
        given["agent.init_config.agent_type"], given["agent.init_config.tool_parser_name"],
        given["agent.init_config.tools"].strip("[]").split(","), "swe_test_reward")
    plan = plan_run(cfg, Hardware(gpus=0, cpus=2))
    assert plan.iterations == 1 and plan.rollout.tools == list(init.tools)
    assert not (tmp_path / "run").exists()  # nothing loaded or written


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_script_is_refused_naming_what_is_missing(local, tmp_path, monkeypatch, capsys, name):
    model, files, _ = local
    data, says = REFUSED[name]
    script = BY_NAME[name]
    with_env(monkeypatch, tmp_path, script)
    run = tmp_path / "run"
    assert main(["train", *tiny_args(script, files[data], run, model)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for phrase in says:
        assert phrase in err, (phrase, err)
    if name.startswith("swe/") or "qwen35" in name:  # their agent types, parser and tools exist
        for key in ("agent_type", "tool_parser_name", "unknown tool", "agent.init_config.tool"):
            assert key not in err, (key, err)
    assert not run.exists()  # stopped before anything was made


def test_run_gui_agent_as_published_gives_two_chain_counts(local, tmp_path, capsys):
    """Its `agent.num_chains=8` and `rollout.n=4` are one key in agentfly (`rollout.n` is
    verl's chain count): refused before the vision agent is even looked at."""
    model = local[0]
    script = BY_NAME["run_gui_agent.sh"]
    args = localize(script["args"], {k: str(model) for k in MODEL_KEYS}, [])
    assert main(["train", *args]) == 2
    assert "agent.num_chains=8 and actor_rollout_ref.rollout.n=4 (command line) are one key" in capsys.readouterr().err
