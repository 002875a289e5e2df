"""Tiny real models for tests and the CPU demo: a byte-level BPE tokenizer trained locally and a
2-layer random Qwen2, saved like any Hugging Face checkpoint.

``build_tiny_model(path)`` writes ``config.json``, ``model.safetensors`` and the tokenizer files
into ``path``; ``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer`` /
``PreTrainedTokenizerFast.from_pretrained(path)`` load them. Everything is seeded, nothing touches
the network, and a build takes well under a second once transformers is imported.

The tokenizer splits every digit into its own token (arithmetic stays learnable at this size),
has the ChatML special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` and carries
Qwen2.5's chat template (``QWEN25_CHAT_TEMPLATE``), so ``tokenizer.apply_chat_template`` renders
exactly what the ``qwen2.5`` template of :mod:`agentfly.rollout.templates` renders.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen2.5-Instruct's chat template (hermes tool calls), as shipped with the official checkpoints.
QWEN25_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.'
    '\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and'
    " arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful"
    " assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first)'
    ' or (message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

_CALCULATOR_TOOL = (
    '{"type": "function", "function": {"name": "calculator", "description": '
    '"Evaluate an arithmetic expression.", "parameters": {"type": "object", "properties": '
    '{"expression": {"type": "string", "description": "The expression, e.g. 12*(3+4)."}}, '
    '"required": ["expression"]}}}'
)


def _training_corpus() -> list[str]:
    """A small deterministic corpus: ChatML calculator conversations and the tool prompt."""
    header = (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{_CALCULATOR_TOOL}\n</tools>\n\nFor each function call, return a json object with "
        "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    )
    ops = ["+", "-", "*"]
    lines = [header]
    for i in range(60):
        a, b, c = (i * 37) % 1000, (i * 53 + 7) % 100, (i * 11) % 10
        op = ops[i % 3]
        expr = f"({a}{op}{b})*{c}" if i % 2 else f"{a} {op} {b}"
        lines.append(
            f"<|im_start|>user\nWhat is {expr}? Use the calculator and give the answer."
            "<|im_end|>\n<|im_start|>assistant\nI will compute it with the tool.\n<tool_call>\n"
            f'{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}\n</tool_call>'
            f"<|im_end|>\n<|im_start|>user\n<tool_response>\n{i}\n</tool_response><|im_end|>\n"
            f"<|im_start|>assistant\nThe answer is {i}. <answer>{i}</answer><|im_end|>\n"
        )
    lines.append(
        "Thought: I should search for the result. Action: search[query] Observation: the page "
        "says hello world. Final Answer: done. <action>choose[Buy Now]</action> ```python\n"
        "print(1)\n``` The quick brown fox jumps over the lazy dog."
    )
    return lines


def build_tokenizer(vocab_size: int = 400) -> Any:
    """Train the byte-level BPE tokenizer; returns a ``PreTrainedTokenizerFast``.

    Args:
        vocab_size: target vocabulary size, special tokens included.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    fast.chat_template = QWEN25_CHAT_TEMPLATE
    return fast


def build_tiny_model(
    path: str | os.PathLike[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    head_dim: int = 16,
    intermediate_size: int | None = None,
    num_kv_heads: int | None = None,
    vocab_size: int = 400,
    max_position_embeddings: int = 2048,
    initializer_range: float = 0.02,
    seed: int = 0,
) -> Path:
    """Save a tiny random Qwen2 causal LM and its tokenizer into ``path``.

    Args:
        path: output directory (created if missing).
        hidden_size: model width.
        num_layers: decoder layers.
        num_heads: attention heads.
        num_kv_heads: key/value heads (grouped-query attention when fewer than ``num_heads``);
            ``num_heads`` when None.
        head_dim: per-head width; ``num_heads * head_dim`` need not equal ``hidden_size``.
        intermediate_size: MLP width; ``4 * hidden_size`` when None.
        vocab_size: BPE target vocabulary; the model's vocabulary is the tokenizer's length.
        max_position_embeddings: longest sequence the config admits.
        initializer_range: std of the random weights; at 0.02 a tied random model mostly
            repeats its last input token, larger values give more varied greedy outputs.
        seed: weights seed; the same seed gives byte-identical weights.

    Returns:
        ``path`` as a ``Path``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
