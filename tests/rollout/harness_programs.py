"""Agent programs for the harness tests: each speaks only OpenAI's API, and ``by_mode`` does what
its row's ``mode`` says (answers, rewrites its history, hangs, raises...)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import openai


async def by_mode(task: dict, client) -> object:
    mode = task.get("mode", "ok")
    messages = [{"role": "user", "content": task["question"]}]
    if mode == "silent":
        return "42"  # never asks the model
    if mode == "hang":
        await asyncio.sleep(3600)
    if mode == "gather":  # best-of-two: two completions of one conversation at once
        replies = await asyncio.gather(*(client.chat.completions.create(model="m", messages=messages)
                                         for _ in range(2)))
        return " | ".join(r.choices[0].message.content or "" for r in replies)
    if mode == "retry":  # the openai SDK as a program writes it: its default retries (two, on a 5xx)
        client = openai.AsyncOpenAI(base_url=str(client.base_url), api_key=client.api_key)
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "content": "408"}]
        reply = await client.chat.completions.create(model="m", messages=messages)  # its first try: a 504
        return reply.choices[0].message.content or ""
    if mode == "malformed":
        await client.chat.completions.create(model="m", messages=messages, tool_choice="required",
                                             tools=[{"type": "function", "function": {"name": "f"}}])
    reply = await client.chat.completions.create(model="m", messages=messages)
    if mode == "raise":
        raise ValueError("the program broke")
    if mode == "not_a_string":
        return 42
    if mode == "forever":  # asks again and again: the chain's max_turns ends it
        while True:
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
            reply = await client.chat.completions.create(model="m", messages=messages)
    if mode == "rewrite":
        # turn 2 extends turn 1; turn 3 drops the history for a summary (a new segment); turn 4
        # extends turn 3; turn 5 edits an earlier message (another segment)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "content": "408"}]
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages = [{"role": "user", "content": task["question"] + " (so far: 408)"}]
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "sure?"}]
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages[0] = {"role": "user", "content": "edited"}
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "well?"}]
        reply = await client.chat.completions.create(model="m", messages=messages)
    return reply.choices[0].message.content or ""


def command_main() -> None:
    """The command form: the row from $AGENTFLY_TASK; modes ``ok``, ``exit``, ``quiet``, ``hang``,
    ``orphan`` (leaves a child behind, writing its pid to the row's ``pid_file``) and ``probe``
    (prints what it could see and do, as JSON)."""
    with open(os.environ["AGENTFLY_TASK"]) as f:
        task = json.load(f)
    mode = task.get("mode", "ok")
    if mode == "orphan":
        import subprocess

        child = subprocess.Popen(["sleep", "3600"])
        with open(task["pid_file"], "w") as f:
            f.write(str(child.pid))
        mode = "hang"
    if mode == "hang":
        import time

        time.sleep(3600)
    client = openai.OpenAI(max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": task["question"]}])
    if mode == "exit":
        print("it went wrong", file=sys.stderr)
        sys.exit(3)
    if mode == "quiet":
        return
    if mode == "probe":  # what the program can see and do (the sandbox test)
        try:
            with open("written-by-the-harness", "w") as f:
                f.write("x")
            wrote = True
        except OSError:
            wrote = False
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        print(json.dumps({"wrote_cwd": wrote, "uid": os.getuid(), "secret": os.environ.get("AGENTFLY_TEST_SECRET"),
                          "processes": len(pids), "reply": reply.choices[0].message.content}))
        return
    print("thinking...")
    print(reply.choices[0].message.content)


if __name__ == "__main__":
    command_main()
