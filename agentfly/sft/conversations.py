"""A chat conversation laid out as the agent loop lays out a chain: the same ids, the same mask.

``agentfly sft`` trains on conversations (OpenAI-style ``messages``: ``system``, ``user``,
``assistant`` with text and/or structured ``tool_calls``, ``tool`` results). Each becomes a
:class:`~agentfly.core.trajectory.Trajectory` built the way :mod:`agentfly.rollout.agent_loop`
builds one, with the run's agent type and chat template:

- the prompt: the messages before the first assistant turn, with the agent's system prompt
  first when the conversation has no system message of its own (the loop's
  :meth:`~agentfly.rollout.agents.base.Agent.initial_messages`), rendered with the agent's tool
  schemas by :meth:`~agentfly.rollout.templates.base.ChatTemplate.prompt`; loss mask 0;
- each assistant turn: its text (structured ``tool_calls`` written by the agent type,
  :meth:`~agentfly.rollout.agents.base.Agent.write_calls`) and the template's end-of-turn marker,
  tokenized on their own, as an engine samples a turn; loss mask 1;
- between two assistant turns: the tool results as the agent type answers its calls
  (:meth:`~agentfly.rollout.agents.base.Agent.observation_messages`), then any user message, as
  the template's text between turns, tokenized on its own; loss mask 0.

A conversation whose assistant turns ask for tools is the loop's chain exactly when the loop's
engine samples the same texts (``tests/sft/test_conversations.py`` replays them through the
scripted engine). Messages after the last assistant turn are left out: a chain ends with its last
sampled turn. What the run's agent type would not read as written is refused as a
:class:`BadRow`: no assistant turn, a tool call that does not parse, a call of a tool the agent
does not have, tool results that do not answer the turn before them.

Images (a vision-language model's, given as :mod:`agentfly.sft.row_images` says) are laid out as
the loop lays out a row's images and a tool's screenshots: each image part rendered by the
vision template as one placeholder, widened to the image's tokens
(:meth:`~agentfly.rollout.vision.VisionProcessor.expand`), the processed pixels kept in
``Trajectory.images`` in the order of their placeholders. Images are in user and tool turns, so
never trained on. One departure from the data as written: a tool result's images come before its
text, where the loop puts the images a tool returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.agents.base import Agent, ToolCallRequest
from agentfly.rollout.templates.base import ChatTemplate
from agentfly.rollout.vision import ImageError
from agentfly.sft.row_images import (
    IMAGE_PARTS,
    RowImageError,
    image_parts,
    is_image_part,
    load_images,
)

if TYPE_CHECKING:
    from agentfly.core.images import ImageInput
    from agentfly.rollout.vision import VisionProcessor

ROLES = ("system", "user", "assistant", "tool")


class BadRow(ValueError):
    """A row ``agentfly sft`` cannot train on; the message says why (the reader adds where)."""


def _content(content: Any, role: str, where: str) -> str | list[dict[str, Any]]:
    """A message's content: text (a string, None, a list of ``{"type": "text"}`` parts joined),
    or, when it holds images (:mod:`agentfly.sft.row_images`), its parts in order, copied."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        kinds = {p.get("type") for p in content}
        if kinds <= {"text"}:
            return "".join(str(p.get("text", "")) for p in content)
        if kinds <= {"text", *IMAGE_PARTS}:
            if role not in ("user", "tool"):
                raise BadRow(f"{where}: an image in a {role} message; images go in user and tool messages")
            return [dict(p) if is_image_part(p) else {"type": "text", "text": str(p.get("text", ""))} for p in content]
        other = sorted(str(k) for k in kinds - {"text", *IMAGE_PARTS})
        raise BadRow(f"{where}: content parts of type {', '.join(other)}; text and image parts are read")
    raise BadRow(f"{where}: content must be text (or a list of text and image parts), got {type(content).__name__}")


def _text(content: str | list[dict[str, Any]]) -> str:
    """The text parts of checked content, joined."""
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def checked_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` as ``{role, content[, tool_calls]}`` dicts, content as :func:`_content` gives it.

    Raises:
        BadRow: not a list of messages, an unknown role, content that is neither text nor images.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRow(f"the messages must be a non-empty list, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            role = m.get("role") if isinstance(m, dict) else type(m).__name__
            raise BadRow(f"{where}: a message needs a role among {', '.join(ROLES)}, got {role!r}")
        message = {"role": m["role"], "content": _content(m.get("content"), m["role"], where)}
        if m.get("tool_calls"):
            if m["role"] != "assistant":
                raise BadRow(f"{where}: only an assistant message makes tool calls")
            message["tool_calls"] = m["tool_calls"]
        out.append(message)
    return out


def call_request(call: Any, where: str) -> ToolCallRequest:
    """A structured tool call (OpenAI's ``{"function": {"name", "arguments"}}``, or
    ``{"name", "arguments"}``) as a request; ``arguments`` may be a JSON string.

    Raises:
        BadRow: no name, or arguments that are not a JSON object.
    """
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadRow(f"{where}: a tool call needs a name ({{'function': {{'name': ..., 'arguments': ...}}}})")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise BadRow(f"{where}: the arguments of tool call {fn['name']!r} are not JSON ({e.msg})") from None
    if not isinstance(args, dict):
        raise BadRow(f"{where}: the arguments of tool call {fn['name']!r} are not a JSON object")
    return ToolCallRequest(fn["name"], args)


def _comparable(call: ToolCallRequest) -> tuple[str, Any]:
    """A call's name and arguments, whitespace at the end of a text argument aside (the code
    agent reads a fenced block with its closing newline)."""
    args = call.arguments
    if isinstance(args, dict):
        args = {k: v.rstrip() if isinstance(v, str) else v for k, v in args.items()}
    return call.name, args


def turn_problem(agent: Agent, text: str) -> str | None:
    """Why the agent type would not run the tool calls of an assistant turn ``text`` as written
    (a call that does not parse, arguments that are not an object, a tool it does not have); None
    when it would."""
    known = {n for t in agent.tools for n in (t.name, *getattr(t, "aliases", ()))}
    for call in agent.parse(text).calls:
        if call.error is not None:
            return f"a tool call does not parse under agent type {agent.name!r}: {call.error}"
        if not isinstance(call.arguments, dict):
            return f"the arguments of tool call {call.name!r} are not a JSON object under agent type {agent.name!r}"
        if call.name not in known:
            tools = ", ".join(sorted(known)) or "none"
            return f"calls tool {call.name!r}, which is not among agent.init_config.tools ({tools})"
    return None


@dataclass
class ConversationRenderer:
    """Lays out conversations with the run's agent type, chat template and tokenizer.

    Attributes:
        agent: the agent type, with its configured tools and system prompt.
        template: the chat template.
        tokenizer: the model's tokenizer.
        vision: a vision-language model's image processor; None: a text model (a row holding
            images is refused).
    """

    agent: Agent
    template: ChatTemplate
    tokenizer: Any
    vision: VisionProcessor | None = None

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _encode_with(self, text: str, images: list[ImageInput]) -> list[int]:
        """``text``'s ids, each image placeholder widened to its image's tokens."""
        ids = self._encode(text)
        return self.vision.expand(ids, images) if images and self.vision is not None else ids

    def render(self, messages: Any, images: Any = None, base_dir: Path | None = None) -> Trajectory:
        """The conversation as a trajectory (see the module docstring).

        Args:
            messages: the conversation.
            images: the row's ``images`` list, taken by the image parts without a source.
            base_dir: where relative image paths start (the data file's folder; None: here).

        Raises:
            BadRow: naming the message and why (an image that cannot be had: the part too).
            ImageError: the row holds images and the model has no image processor.
        """
        msgs = checked_messages(messages)
        starts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        if not starts:
            raise BadRow("no assistant turn: nothing to train on")
        pictures = self._images(msgs, images, base_dir)
        head = [{"role": m["role"], "content": m["content"]} for m in msgs[: starts[0]]]
        head_images = [im for i in range(starts[0]) for im in pictures.get(i, [])]
        system = self.agent.system_prompt
        if system and (not head or head[0]["role"] != "system"):
            head.insert(0, {"role": "system", "content": system})
        tools = self.agent.template_tools()
        prompt = self._encode_with(self.template.prompt(head, tools), head_images)
        traj = Trajectory(prompt_ids=prompt, messages=head, images=head_images)
        for start, end in zip(starts, [*starts[1:], None], strict=True):
            content, calls = self._turn(msgs[start], start)
            ids = self._encode(content + self.template.end_of_turn)
            traj.append_sampled(ids, [0.0] * len(ids))
            traj.num_turns += 1
            traj.messages.append({"role": "assistant", "content": content})
            if end is None:
                break
            answer, shown = self._answer(calls, msgs[start + 1 : end], start, pictures)
            between = self.template.between_turns([*traj.messages, *answer], tools, closed=True)
            traj.append_observation(self._encode_with(between, shown))
            traj.images.extend(shown)
            traj.messages.extend(answer)
        traj.final_response = traj.messages[-1]["content"]
        return traj

    def _images(self, msgs: list[dict[str, Any]], row_images: Any, base_dir: Path | None) -> dict[int, list[ImageInput]]:
        """The conversation's images, processed, by message (:func:`~agentfly.sft.row_images.load_images`)."""
        if not any(True for _ in image_parts(msgs)):
            if row_images:
                raise BadRow(f"the row has {len(row_images)} 'images' and no image part takes them")
            return {}
        if self.vision is None:
            raise ImageError(
                "the row holds images, but the model is a text model (its config has no "
                "vision_config): train a vision-language model (Qwen2.5-VL) with a vision template "
                "(agent.init_config.template=qwen2.5-vl)"
            )
        try:
            return load_images(msgs, row_images, base_dir or Path("."), self.vision)
        except RowImageError as e:
            raise BadRow(str(e)) from None

    def _turn(self, message: dict[str, Any], index: int) -> tuple[str, list[ToolCallRequest]]:
        """An assistant message's text as the agent type writes it, and its calls as it reads them."""
        where = f"messages[{index}]"
        content = message["content"]
        requests = [call_request(c, where) for c in message.get("tool_calls") or []]
        if requests:
            try:
                written = self.agent.write_calls(requests)
            except (NotImplementedError, ValueError) as e:
                raise BadRow(f"{where}: {e}") from None
            content = f"{content}\n{written}" if content else written
        problem = turn_problem(self.agent, content)
        if problem:
            raise BadRow(f"{where}: {problem}")
        calls = self.agent.parse(content).calls
        if requests and list(map(_comparable, calls)) != list(map(_comparable, requests)):
            read_back = [(c.name, c.arguments) for c in calls]
            raise BadRow(
                f"{where}: agent type {self.agent.name!r} reads its {len(requests)} written tool "
                f"call(s) back as {read_back}"
            )
        return content, calls

    def _answer(
        self, calls: list[ToolCallRequest], between: list[dict[str, Any]], index: int,
        pictures: dict[int, list[ImageInput]],
    ) -> tuple[list[dict[str, Any]], list[ImageInput]]:
        """The messages between two assistant turns as the loop writes them (the tool results
        as the agent type answers ``calls``, then the others as they are), and their images in
        the order of their placeholders. A tool result's images come before its text, where the
        loop puts the images a tool returns."""
        results = 0
        while results < len(between) and between[results]["role"] == "tool":
            results += 1
        if any(m["role"] == "tool" for m in between[results:]):
            raise BadRow(f"messages[{index}]: a tool result follows a user or system message, not the tool call")
        if len(calls) != results:
            raise BadRow(
                f"messages[{index}]: the assistant turn makes {len(calls)} tool call(s), and "
                f"{results} tool result(s) follow it"
            )
        texts = [_text(m["content"]) for m in between[:results]]
        observations = self.agent.observation_messages(calls, texts) if calls else []
        per_result = [pictures.get(index + 1 + k, []) for k in range(results)]
        targets: dict[int, list[ImageInput]] = {}  # observation message -> its images
        for k, images in enumerate(per_result):
            if images:
                targets.setdefault(k if len(observations) == results else len(observations) - 1, []).extend(images)
        shown: list[ImageInput] = []
        for k, message in enumerate(observations):
            if k in targets:
                content = message["content"]
                items = content if isinstance(content, list) else [{"type": "text", "text": content}]
                message["content"] = [*({"type": "image"} for _ in targets[k]), *items]
                shown.extend(targets[k])
        others = [{"role": m["role"], "content": m["content"]} for m in between[results:]]
        shown.extend(im for k in range(results, len(between)) for im in pictures.get(index + 1 + k, []))
        return [*observations, *others], shown
