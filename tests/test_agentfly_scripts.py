"""AgentFly's published training scripts (tests/config/agentfly_scripts.py) through `agentfly fit`
on this CPU: each script's words with only the model (a tiny local one), the data (small files
made here, in the rows its reward and environment read; the search tool's corpus among them),
the GPU counts (the engine in this process: `rollout.num_engines=0`), the batch sizes (1 prompt,
2 chains, 1 turn, 8 tokens), the run folder and the step counts (1 iteration, no validation, no
checkpoint) replaced, and `rollout.name=transformers` for vLLM. A vision script (its data rows
hold images) gets the tiny Qwen2.5-VL (agentfly.models.tiny_vl), the others the tiny text model.
An empty value the script passes (AgentFly's slip) stays empty.

- Trains one iteration, in this process, and writes its metrics: each script with a distinct
  agent type, template, tools, reward or environment (TRAINS).
- Composed and planned only, nothing loaded: the ScienceWorld and WebShop scripts whose agent,
  template, tools and reward are those of one that trains (COMPOSES); the whole module ran
  ~180 s with `-n 2` on the shared 2-core machine under a load of ~4-5, most of it the seven fits
  (12-44 s each; a worker's first fit carries the imports, ScienceWorld's its two JVMs). The
  vision scripts train on a synthetic GUI task row (agentfly.envs.gui_tasks) and an InfoSeek-style
  row on its screenshot; the VQA script's `asyncdense_retrieve` on a FAISS index and a tiny BERT
  encoder built here (the settings AgentFly's fixed cache files become in agentfly).
- Composed and planned with the offline SWE task (agentfly.data.buggy_repos) and its reward in
  place of R2E-Gym's, and without the sequence parallelism and packing agentfly lacks: the SWE
  scripts, their agent types, parser and workspace tools as published (OFFLINE_SWE).
- Refused before anything loads (REFUSED): exit 2 and a message naming each missing thing (a
  name agentfly lacks, a package or game files not installed here, a judge service, an SWE
  image's reward), no traceback; the script's ``missing`` entry says why, so
  the case moves to TRAINS when the name lands.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentfly.cli import load_config, main
from agentfly.data.buggy_repos import make_task
from agentfly.envs.gui_tasks import write_gui_tasks
from agentfly.models.tiny import build_tiny_model
from agentfly.models.tiny_vl import build_tiny_vl_model
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
TOKEN_KEYS = (
    "agent.generation_config.max_tokens", "agent.run_config.generation_config.max_tokens",
    "actor_rollout_ref.rollout.response_length",  # the budget where the script gives no max_tokens
)
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
        # the tiny models' context (a longer one is refused: no engine serves it)
        "agent.init_config.max_model_len": "4096",
    })
    more = [f"trainer.default_local_dir={run}", "actor_rollout_ref.rollout.num_engines=0", *extra]
    return localize(script["args"], replace, more)


VISION = ("gui", "vqa")  # the data sets whose rows hold images: read by the tiny VL model
PASSAGES = ["Hamlet was written by William Shakespeare.", "Paris is the capital of France.",
            "A circle is a round shape."]


@dataclass(frozen=True)
class Local:
    """What the scripts run on here: the two tiny models, a data file per row shape, the
    search tool's corpus and ``async_dense_retrieve``'s settings (None without faiss)."""

    text_model: Path
    vl_model: Path
    files: dict[str, Path]
    corpus: Path
    dense: dict[str, str] | None

    def model(self, data: str) -> Path:
        return self.vl_model if data in VISION else self.text_model


def dense_retrieval(root: Path, passages: list[str]) -> dict[str, str]:
    """``async_dense_retrieve``'s settings: a FAISS index of ``passages`` embedded by a tiny BERT
    encoder built here (E5's way: the mean of the last hidden states, L2-normalised), its corpus
    (row ``i`` is passage ``i``) and the encoder's folder."""
    import faiss
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    encoder = root / "encoder"
    encoder.mkdir(parents=True)
    words = sorted({w for p in ["query: passage:", *passages] for w in re.findall(r"\w+|[^\w\s]", p.lower())})
    (encoder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    tokenizer = BertTokenizerFast(vocab_file=str(encoder / "vocab.txt"))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)).eval()
    model.save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    batch = tokenizer([f"passage: {p}" for p in passages], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state  # (P, L, D)
    mask = batch["attention_mask"].unsqueeze(-1).float()  # (P, L, 1)
    rows = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)  # (P, D)
    index = faiss.IndexFlatIP(rows.shape[1])
    index.add(rows.numpy())
    faiss.write_index(index, str(root / "e5_Flat.index"))
    corpus = root / "wiki.jsonl"
    corpus.write_text("\n".join(json.dumps({"id": i, "contents": p}) for i, p in enumerate(passages)))
    return {"index_path": str(root / "e5_Flat.index"), "corpus_path": str(corpus), "encoder_path": str(encoder)}


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Local:
    """The tiny models and a data file per row shape the scripts' rewards and environments read."""
    root = tmp_path_factory.mktemp("agentfly_scripts")
    text_model = build_tiny_model(root / "model", max_position_embeddings=4096)
    vl_model = build_tiny_vl_model(root / "vl_model", max_position_embeddings=4096)
    files = {"gui": root / "gui.json"}
    # the GUI task's: a screenshot (screens/ beside the file) and AgentFly's gt_action, gt_bbox, gt_input_text
    gui = write_gui_tasks(files["gui"], PROMPTS, "train", seed=0)
    shape = gui[0]["screen"]["elements"][gui[0]["screen"]["target"]]  # the first row's is a shape
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
        # InfoSeek's, as infoseek_reward reads them: an image (the GUI screen), its question, answers
        "vqa": [{"question": f"What colour is the {shape['shape']} in this picture?", "images": gui[0]["images"],
                 "answer": [shape["color"]], "answer_eval": [shape["color"]]}],
    }
    for name, r in rows.items():
        files[name] = root / f"{name}.json"
        files[name].write_text(json.dumps(r))
    if importlib.util.find_spec("rapidfuzz"):  # WebShop's: a goal of the generated catalog
        from agentfly.envs.webshop import make_data

        files["webshop"] = root / "webshop.json"
        files["webshop"].write_text(json.dumps(make_data(root / "webshop", val=1)["train"][:PROMPTS]))
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in PASSAGES))
    dense = dense_retrieval(root / "dense", PASSAGES) if importlib.util.find_spec("faiss") else None
    return Local(text_model, vl_model, files, corpus, dense)


# script -> (data, what the machine needs): each a distinct agent type, template, tools and reward
TRAINS = {
    "train_example.sh": ("math", ()),  # hermes (AgentFly's hf), the tokenizer's template, calculator
    "scienceworld/train_science_world.sh": ("scienceworld", ("scienceworld", "java")),  # action, env
    "search/train_search_r1.sh": ("qa", ("bm25s",)),  # searchr1, qwen3-think-no-tool, qa_em_reward
    "search/train_tool_call_ray.sh": ("qa", ("bm25s",)),  # hermes parser, [search,answer]
    "webshop/train_webshop.sh": ("webshop", ("rapidfuzz",)),  # action, WebShop's env and reward
    "run_gui_agent.sh": ("gui", ()),  # gui, qwen2.5-vl, pyautogui_code_generator, gui_reward
    # react, qwen2.5-vl, [asyncdense_retrieve,answer_qa] over the index built here, infoseek_reward
    "vqa/run_vlm_qa.sh": ("vqa", ("faiss",)),
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
    data, needs = TRAINS[name]
    for need in needs:
        if need == "java":
            if shutil.which("java") is None:
                pytest.skip("needs a Java runtime for ScienceWorld")
        else:
            pytest.importorskip(need, reason=f"needs the {need} package")
    script = BY_NAME[name]
    with_env(monkeypatch, tmp_path, script)
    # the retrievers' corpus and index are data made here
    extra = {
        "qa": [f"agent.init_config.tool_config.search.corpus_path={local.corpus}"],
        "vqa": [f"agent.init_config.tool_config.async_dense_retrieve.{k}={v}" for k, v in (local.dense or {}).items()],
    }.get(data, [])
    run = tmp_path / "run"
    assert main(["train", *tiny_args(script, local.files[data], run, local.model(data), extra)]) == 0
    iterations = [float(r["training/iteration"]) for r in metrics_rows(run) if r.get("training/iteration")]
    assert iterations == [1.0]
    # every chain scored: the reward read its fields from the row (a failed reward drops the group)
    (record,) = [json.loads(line) for line in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()]
    assert record["dropped_rows"] == [] and len(record["rewards"]) == CHAINS, record


@pytest.mark.parametrize("name", sorted(COMPOSES))
def test_script_composes_and_plans(local, tmp_path, name):
    from agentfly.run.plan import plan_run
    from agentfly.run.topology import Hardware

    data = COMPOSES[name]
    if data not in local.files:
        pytest.skip("needs the rapidfuzz package for WebShop's catalog")
    script = BY_NAME[name]
    with warnings.catch_warnings():  # the settings a CPU run leaves unused are named: not checked here
        warnings.simplefilter("ignore")
        cfg = load_config(tiny_args(script, local.files[data], tmp_path / "run", local.model(data)))
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

    script = BY_NAME[name]
    given = dict(a.split("=", 1) for a in script["args"])
    offline = {**OFFLINE_SWE, "agent.init_config.template": given.get("agent.init_config.template") or "qwen-xml-think"}
    args = localize(tiny_args(script, local.files["swe_offline"], tmp_path / "run", local.text_model), offline, [])
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
    data, says = REFUSED[name]
    script = BY_NAME[name]
    with_env(monkeypatch, tmp_path, script)
    run = tmp_path / "run"
    assert main(["train", *tiny_args(script, local.files[data], run, local.model(data))]) == 2
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
    script = BY_NAME["run_gui_agent.sh"]
    args = localize(script["args"], {k: str(local.vl_model) for k in MODEL_KEYS}, [])
    assert main(["train", *args]) == 2
    assert "agent.num_chains=8 and actor_rollout_ref.rollout.n=4 (command line) are one key" in capsys.readouterr().err


def test_run_vlm_qa_without_its_index_is_refused_naming_the_settings(local, tmp_path, monkeypatch, capsys):
    """AgentFly's `asyncdense_retrieve` reads fixed cache files; here they are settings, which the
    script does not give: refused naming them before anything loads."""
    script = BY_NAME["vqa/run_vlm_qa.sh"]
    with_env(monkeypatch, tmp_path, script)
    run = tmp_path / "run"
    assert main(["train", *tiny_args(script, local.files["vqa"], run, local.vl_model)]) == 2
    err = capsys.readouterr().err
    assert "tool 'async_dense_retrieve' needs the setting(s) index_path, corpus_path, encoder_path" in err, err
    assert "Traceback" not in err and not run.exists()
