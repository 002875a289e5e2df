"""Build the demo's tiny chat model: ``agentfly/demo/model/``.

A 2-layer Qwen2 with a locally trained byte-level BPE tokenizer, warm-started by a short
supervised run on synthetic tool-use traces of the demo's arithmetic task, so that it knows the
conversation format and the ``calculator``/``answer`` tools but copies digits unreliably: RL has
room to improve it.

A trace is exactly what the agent loop produces at rollout with the ``hf`` agent and the
``qwen2.5-no-system-tool`` template (ChatML, default system prompt, no tool catalogue): the
prompt, a calculator call, the observation's text between turns, an answer call. Each piece is rendered by the
template class the loop uses and tokenized on its own, as the loop does, so the token ids match a
rollout's token for token.

Design for the speed of the RL loop (see ``shared/notes/tiny-agent-demo.md``):

- Tokenizer: every digit its own token (Qwen2's pre-tokenizer, which transformers imposes on
  any ``qwen2`` checkpoint anyway); each fixed run of format text between special tokens and
  variable parts (the system prompt, ``user\\nWhat is ``, ``<tool_call>\\n{"name":
  "calculator", "arguments": {"expression": "``, ``"}}\\n</tool_call>``, the observation
  wrapper) is one added token. A calculator turn is ``len(expression) + 3`` sampled tokens, an
  answer turn ``len(answer) + 3``, a whole two-turn conversation ~50 tokens; vocabulary 268.
- Warm start on *noisy* traces: ``NOISE`` of them carry one digit-copy error, in the calculator
  call or in the answer. The model learns the format well (high tool-call rate) but its sampled
  digits are unreliable, so sampled accuracy at temperature 1 starts low.

Fully seeded; with the same torch version and thread count a rerun writes byte-identical files.

    python scripts/make_demo_model.py                 # writes agentfly/demo/model/ (~2 min)
    python scripts/make_demo_model.py --measure       # then rolls out the val split
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from pathlib import Path
from typing import Any

from make_demo_data import DEFAULT_OUT as DATA_DIR
from make_demo_data import make_problem, make_splits, question

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "agentfly" / "demo" / "model"
SEED = 0
TEMPLATE = "qwen2.5-no-system-tool"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
END_OF_TURN = "<|im_end|>"

# model (notes: hidden 128, 2 layers, 4 heads, tied embeddings: ~0.55M parameters)
HIDDEN = 128
LAYERS = 2
HEADS = 4
INTERMEDIATE = 512
MAX_POSITIONS = 512

# warm start (notes: batch 64, AdamW 3e-3, 20 warm-up steps, clip 1.0)
STEPS = 640
BATCH = 64
LR = 3e-3
WARMUP = 20
CLIP = 1.0
NOISE = 0.4  # share of traces with one digit-copy error
TOKENIZER_TRACES = 4000
TOKENIZER_VOCAB = 384
TOKENIZER_MIN_FREQUENCY = 100


# -- traces -------------------------------------------------------------------------------------


def tool_call(name: str, **arguments: str) -> str:
    """An assistant turn calling one tool, as the ``hf`` agent parses it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def miscopy(text: str, rng: random.Random) -> str:
    """``text`` with one digit replaced by another digit (never by a leading zero)."""
    i = rng.choice([i for i, ch in enumerate(text) if ch.isdigit()])
    leading = (i == 0 or not text[i - 1].isdigit()) and i + 1 < len(text) and text[i + 1].isdigit()
    choices = [d for d in "0123456789" if d != text[i] and not (leading and d == "0")]
    return text[:i] + rng.choice(choices) + text[i + 1 :]


def trace_segments(
    expression: str, template: Any, rng: random.Random, noise: float = NOISE
) -> list[tuple[str, bool]]:
    """One conversation as (text, sampled) pieces, in the order the agent loop builds it.

    The pieces are the prompt, the calculator turn (with its end-of-turn marker, as sampled),
    the observation's text between turns, the answer turn. With probability ``noise`` the calculator call or
    the answer has one digit miscopied.
    """
    from agentfly.rollout.tools.calculator import calculate

    call_expression = expression
    wrong_answer = False
    if rng.random() < noise:
        if rng.random() < 0.5:
            call_expression = miscopy(expression, rng)
        else:
            wrong_answer = True
    observation = calculate(call_expression)
    answer = miscopy(observation, rng) if wrong_answer else observation
    messages: list[dict[str, str]] = [{"role": "user", "content": question(expression)}]
    prompt = template.prompt(messages)
    first = tool_call("calculator", expression=call_expression)
    messages += [{"role": "assistant", "content": first}, {"role": "tool", "content": observation}]
    between = template.between_turns(messages, closed=True)
    second = tool_call("answer", answer=answer)
    return [
        (prompt, False),
        (first + END_OF_TURN, True),
        (between, False),
        (second + END_OF_TURN, True),
    ]


def format_tokens(template: Any) -> list[str]:
    """The fixed text of a trace between special tokens and variable parts (question numbers,
    tool arguments, observations), e.g. ``<tool_call>\\n{"name": "calculator", "arguments":
    {"expression": "``: each becomes one token. Derived from the template, in order of
    appearance."""
    hole = "@@"
    messages: list[dict[str, str]] = [{"role": "user", "content": question(hole)}]
    call = tool_call("calculator", expression=hole)
    texts = [template.prompt(messages), call, tool_call("answer", answer=hole)]
    messages += [{"role": "assistant", "content": call}, {"role": "tool", "content": hole}]
    texts.append(template.between_turns(messages, closed=True))
    split = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, hole)))
    pieces = [piece for text in texts for piece in split.split(text) if len(piece) > 1]
    return list(dict.fromkeys(pieces))


def corpus(template: Any, rng: random.Random, count: int, fixed: list[str]) -> list[str]:
    """What the BPE trainer sees: the text of ``count`` traces, each piece on its own (as the
    loop tokenizes it), without the special and ``fixed`` tokens."""
    split = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, *fixed)))
    return [
        part
        for _ in range(count)
        for text, _ in trace_segments(make_problem(rng)[0], template, rng)
        for part in split.split(text)
        if part
    ]


# -- tokenizer ----------------------------------------------------------------------------------


def build_tokenizer(template: Any, seed: int = SEED) -> Any:
    """A byte-level BPE tokenizer for the traces; returns a ``PreTrainedTokenizerFast``.

    The normalizer and pre-tokenizer are Qwen2's (transformers' ``Qwen2Tokenizer`` imposes
    them on any ``qwen2`` checkpoint loaded with ``AutoTokenizer``): every digit is its own
    token. The format text of the traces (:func:`format_tokens`) is added as whole tokens, the
    BPE is trained on what is left (operators, signs) and keeps the full byte alphabet, so any
    text still encodes.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    from agentfly.models.tiny import QWEN25_CHAT_TEMPLATE

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        min_frequency=TOKENIZER_MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    fixed = format_tokens(template)
    tok.train_from_iterator(corpus(template, random.Random(seed), TOKENIZER_TRACES, fixed), trainer)
    tok.add_tokens([AddedToken(t, normalized=False) for t in fixed])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END_OF_TURN,
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=MAX_POSITIONS,
    )
    # Qwen2.5's template renders exactly like ``qwen2.5-no-system-tool`` when given no tools
    fast.chat_template = QWEN25_CHAT_TEMPLATE
    return fast


def encode_trace(tokenizer: Any, segments: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    """Token ids of a trace, piece by piece, and the loss mask (1 on sampled pieces)."""
    ids: list[int] = []
    mask: list[int] = []
    for text, sampled in segments:
        piece = tokenizer.encode(text, add_special_tokens=False)
        ids += piece
        mask += [int(sampled)] * len(piece)
    return ids, mask


# -- warm start ---------------------------------------------------------------------------------


def build_model(tokenizer: Any, seed: int = SEED, save_tokenizer_to: Path | None = None) -> Any:
    """The seeded random Qwen2 for ``tokenizer``; saves the tokenizer and config when asked."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(END_OF_TURN),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    if save_tokenizer_to is not None:
        tokenizer.save_pretrained(save_tokenizer_to)
        model.config.save_pretrained(save_tokenizer_to)
    return model


def batch_of_traces(
    tokenizer: Any, template: Any, rng: random.Random, size: int, exclude: set[str]
) -> tuple[Any, Any]:
    """Input ids (right-padded) and labels (-100 off the sampled tokens) of fresh traces."""
    import torch

    rows = []
    while len(rows) < size:
        expression, _ = make_problem(rng)
        if question(expression) in exclude:
            continue
        rows.append(encode_trace(tokenizer, trace_segments(expression, template, rng)))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((size, width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((size, width), -100, dtype=torch.long)
    for i, (ids, mask) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(ids)] = torch.tensor(
            [t if m else -100 for t, m in zip(ids, mask, strict=True)]
        )
    return input_ids, labels  # (B, T), (B, T)


def warm_start(model: Any, tokenizer: Any, template: Any, steps: int, seed: int = SEED) -> None:
    """Supervised training on fresh noisy traces; loss on the sampled (assistant) tokens only."""
    import torch

    exclude = {row["question"] for row in make_splits()["val"]}
    rng = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP))
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        input_ids, labels = batch_of_traces(tokenizer, template, rng, BATCH, exclude)
        logits = model(input_ids=input_ids).logits[:, :-1]  # (B, T-1, V)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            print(
                f"step {step:4d}  loss {loss.item():.4f}  {time.perf_counter() - start:.0f}s",
                flush=True,
            )
    model.eval()


# -- measuring with the real agent loop ----------------------------------------------------------


def measure(model_dir: Path, rows: list[dict[str, Any]], seed: int = SEED) -> dict[str, float]:
    """Roll out ``rows`` through the agent loop: accuracy sampled and greedy, tool-call rate,
    tokens per conversation, and the time of 16 prompts x 8 chains."""
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools import get_tool

    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(model_dir), "seed": seed})
    try:
        loop = AgentLoop(
            engine=pool,
            tokenizer=pool.tokenizer,
            template=get_template(TEMPLATE),
            agent=get_agent("hermes", [get_tool("calculator"), get_tool("answer")]),
            reward="math_equal_reward_tool",
            max_turns=3,
            max_tokens=32,
            temperature=1.0,
            seed=seed,
        )
        result: dict[str, float] = {}
        for name, greedy in (("sampled", False), ("greedy", True)):
            trajs = loop.run(rows, greedy=greedy)
            result[f"{name}_accuracy"] = mean(t.reward_extras.get("acc", 0.0) for t in trajs)
            result[f"{name}_tool_call_rate"] = mean(float(bool(t.tool_calls)) for t in trajs)
            result[f"{name}_ok_calls"] = mean(
                float(bool(t.tool_calls) and all(c.ok for c in t.tool_calls)) for t in trajs
            )
            result[f"{name}_answered"] = mean(float(t.finish_reason == "answer") for t in trajs)
            result[f"{name}_tokens"] = mean(
                float(len(t.prompt_ids) + len(t.response_ids)) for t in trajs
            )
            result[f"{name}_sampled_tokens"] = mean(float(sum(t.loss_mask)) for t in trajs)
        loop.run(rows[:16], num_chains=8)  # warm-up
        start = time.perf_counter()
        loop.run(rows[16:32], num_chains=8)
        result["seconds_per_128_chains"] = time.perf_counter() - start
    finally:
        pool.shutdown()
    return result


def mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


# -- main ---------------------------------------------------------------------------------------


def make_model(out: Path, steps: int = STEPS, seed: int = SEED, threads: int = 2) -> Path:
    """Train the tokenizer, warm-start the model and save both (with the chat template)."""
    import torch
    from transformers import AutoTokenizer

    from agentfly.rollout.templates import get_template

    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    template = get_template(TEMPLATE)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(build_tokenizer(template, seed), seed, save_tokenizer_to=out)
    # train on exactly what the engines will load (AutoTokenizer: Qwen2Tokenizer for qwen2)
    tokenizer = AutoTokenizer.from_pretrained(out)
    print(f"vocabulary {len(tokenizer)}, {sum(p.numel() for p in model.parameters()):,} parameters")
    warm_start(model, tokenizer, template, steps, seed)
    model.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--steps", type=int, default=STEPS, help="warm-start steps")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (same for reruns)")
    parser.add_argument("--measure", action="store_true", help="roll out the val split after")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    make_model(args.out, args.steps, args.seed, args.threads)
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f}s", flush=True)
    if args.measure:
        rows = json.loads((DATA_DIR / "val.json").read_text(encoding="utf-8"))
        for key, value in measure(args.out, rows, args.seed).items():
            print(f"{key}: {value:.3f}")


if __name__ == "__main__":
    main()
