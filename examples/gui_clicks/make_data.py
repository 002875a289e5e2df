"""Write the GUI example's data: screens with one shape to click, demonstrations, held out.

    python examples/gui_clicks/make_data.py [--out runs/gui_clicks/data]

Screens are the ``gui`` environment's ``locate`` task (:mod:`agentfly.envs.gui_tasks`): one
shape alone on a 112 x 112 screen, in one of eight cells (two columns, four rows), and the goal
"Click the red circle.". Each split lays out from its own seeds, so no two files share a screen:

- ``sft_train.jsonl`` / ``sft_val.jsonl``: demonstrations as chats of the ``gui`` agent (the
  system prompt, the goal and the screenshot, the click on the shape's centre as a ``gui_step``
  call); the warm start learns the format from them;
- ``rl_train.jsonl``: screens for GRPO, the click played by ``gui_step``;
- ``held_out.jsonl``: screens for evaluation.

The first screenshot of each row is written to ``screens/`` beside the files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from agentfly.envs.gui_tasks import make_gui_tasks

#: the system prompt of both stages (agent.init_config.system_prompt in sft.yaml and rl.yaml)
SYSTEM = "Click what the task names. Answer with Action: click(start_box='(x,y)'), in the screenshot's pixels."
#: (file, split, dataset seed, rows)
SPLITS = (
    ("sft_train", "train", 1, 2000),
    ("sft_val", "heldout", 1, 16),
    ("rl_train", "train", 0, 512),
    ("held_out", "heldout", 0, 64),
)


def task_row(row: dict) -> dict:
    """A ``gui`` row whose question is the goal, the screenshot after it."""
    return {**row, "question": f"{row['goal']}<image>"}


def demonstration(row: dict) -> dict:
    """The row as a chat: the goal and the screenshot, then the click on the target's centre."""
    x1, y1, x2, y2 = row["gt_bbox"]
    action = f"click(start_box='({(x1 + x2) // 2},{(y1 + y2) // 2})')"
    call = {"type": "function", "function": {"name": "gui_step", "arguments": json.dumps({"action": action})}}
    return {"images": row["images"], "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": row["goal"]}, {"type": "image"}]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/gui_clicks/data")
    parser.add_argument("--rows", type=int, default=None, help="at most this many rows a file (a short run)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, split, seed, n in SPLITS:
        n = min(n, args.rows or n)
        rows = make_gui_tasks(n, split, seed, image_dir=out, kinds=("locate",))
        rows = [demonstration(r) for r in rows] if name.startswith("sft") else [task_row(r) for r in rows]
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {out / name}.jsonl")


if __name__ == "__main__":
    main()
