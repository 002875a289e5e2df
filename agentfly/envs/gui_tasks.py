"""Task rows for the ``gui`` environment: screens laid out from a seed, train and held-out apart.

:func:`make_screen` lays out one page from a seed (elements in a grid of 28-pixel rows, so
none overlap); :func:`make_gui_tasks` makes ``n`` rows of a split, each with its page
(``screen``), its ``goal`` and ``question``, and the first correct action in AgentFly's GUI
fields (``gt_action``, ``gt_bbox`` in first-screen pixels, ``gt_input_text``; read by
``gui_reward``). Four kinds of task:

- ``shape``: "Click the red circle." among shapes of other colours and kinds, and buttons;
- ``button``: "Click the button labelled OK." among other labels, and shapes;
- ``form``: type a word into the text field, then click Submit (first action: click the field);
- ``scroll``: the button to click is below the first screen (first action: scroll down);
- ``locate``: one shape alone on the screen, "Click the red circle." (grounding a position only;
  not among the kinds drawn by default).

Train and held-out rows never share a layout seed: row ``i`` of a split with ``seed`` lays out
from ``2 * (seed * 1_000_003 + i)`` for train and that plus one for held-out.

Given ``image_dir`` (the folder of the data file), each row's first screenshot is written to
``screens/<task_id>.png`` there and the row names it in ``images``, relative to the data file,
as agentfly's loader reads it; that screenshot is what ``reset`` shows. From the shell::

    python -m agentfly.envs.gui_tasks --out data/gui/train.json --n 500 --split train
    python -m agentfly.envs.gui_tasks --out data/gui/heldout.json --n 100 --split heldout
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentfly.envs.gui import COLORS, SHAPES, describe, render_png

KINDS = ("shape", "button", "form", "scroll")
ALL_KINDS = (*KINDS, "locate")
SPLITS = ("train", "heldout")
LABELS = ("OK", "Cancel", "Save", "Open", "Next", "Back", "Help", "Quit", "Send", "Edit")
WORDS = ("cat", "blue", "hello", "paris", "seven", "apple", "river", "light")
ROW_HEIGHT = 28
COLUMN_WIDTH = 56
ACTION_HINT = ("Answer with 'Thought: ...' and then 'Action: ...', the action one of "
               "click(start_box='(x,y)'), type(content='...') or scroll(direction='down'), "
               "coordinates in the screenshot's pixels.")


def layout_seed(seed: int, split: str, index: int) -> int:
    """The layout seed of row ``index`` of ``split`` (train even, held-out odd: never shared)."""
    if split not in SPLITS:
        raise ValueError(f"split is one of {', '.join(SPLITS)}, got {split!r}")
    return 2 * (seed * 1_000_003 + index) + SPLITS.index(split)


def make_screen(seed: int, width: int = 112, height: int = 112, kind: str | None = None) -> dict[str, Any]:
    """One page laid out from ``seed`` (a ``kind`` of :data:`KINDS`, else one drawn from the seed).

    Raises:
        ValueError: a screen smaller than 112x112 pixels (eight cells), or an unknown kind.
    """
    if width < 2 * COLUMN_WIDTH or height < 4 * ROW_HEIGHT:
        raise ValueError(f"a gui screen is at least {2 * COLUMN_WIDTH}x{4 * ROW_HEIGHT} pixels, got {width}x{height}")
    rng = random.Random(seed)
    kind = kind or rng.choice(KINDS)
    if kind not in ALL_KINDS:
        raise ValueError(f"kind is one of {', '.join(ALL_KINDS)}, got {kind!r}")
    columns, rows = width // COLUMN_WIDTH, height // ROW_HEIGHT
    cells = [(r, c) for r in range(rows) for c in range(columns)]
    rng.shuffle(cells)
    colors = list(COLORS)
    labels = rng.sample(LABELS, len(LABELS))
    combos = rng.sample([(c, s) for c in colors for s in SHAPES], len(colors) * len(SHAPES))
    elements: list[dict[str, Any]] = []
    spec: dict[str, Any] = {"width": width, "height": height, "page_height": height, "text": None}

    def button(cell: tuple[int, int], label: str) -> dict[str, Any]:
        return {"kind": "button", "label": label, "color": rng.choice(colors), "box": _cell_box(cell, inset=4)}

    def shape(cell: tuple[int, int], color: str, form: str) -> dict[str, Any]:
        x1, y1, _, _ = _cell_box(cell, inset=0)
        left, top = x1 + (COLUMN_WIDTH - 20) // 2, y1 + (ROW_HEIGHT - 20) // 2
        return {"kind": "shape", "shape": form, "color": color, "box": [left, top, left + 19, top + 19]}

    if kind == "locate":
        elements.append(shape(cells.pop(), *combos.pop()))
        target = 0
    elif kind == "shape":
        elements += [shape(cells.pop(), *combos.pop()) for _ in range(rng.randint(3, 5))]
        elements += [button(cells.pop(), labels.pop()) for _ in range(rng.randint(0, 2))]
        target = rng.randrange(len(elements) - sum(e["kind"] == "button" for e in elements))
    elif kind == "button":
        elements += [button(cells.pop(), labels.pop()) for _ in range(rng.randint(3, 5))]
        target = rng.randrange(len(elements))
        elements += [shape(cells.pop(), *combos.pop()) for _ in range(rng.randint(0, 2))]
    elif kind == "form":
        row = rng.randrange(rows)
        cells = [cell for cell in cells if cell[0] != row]
        elements.append({"kind": "field", "box": [4, row * ROW_HEIGHT + 4, width - 5, (row + 1) * ROW_HEIGHT - 5]})
        elements.append(button(cells.pop(), "Submit"))
        elements += [button(cells.pop(), labels.pop()) for _ in range(rng.randint(1, 2))]
        target, spec["text"] = 1, rng.choice(WORDS)
    else:  # scroll: the target is in the page's second screen, below the first
        spec["page_height"] = 2 * height
        elements += [button(cells.pop(), labels.pop()) for _ in range(rng.randint(2, 4))]
        below = (rng.randrange(height // 2 // ROW_HEIGHT) + rows, rng.randrange(columns))
        elements.append(button(below, labels.pop()))
        target = len(elements) - 1
    spec.update(elements=elements, target=target, goal=_goal(elements, target, spec["text"], kind))
    return spec


def _cell_box(cell: tuple[int, int], inset: int) -> list[int]:
    row, column = cell
    x1, y1 = column * COLUMN_WIDTH, row * ROW_HEIGHT
    return [x1 + inset, y1 + inset, x1 + COLUMN_WIDTH - 1 - inset, y1 + ROW_HEIGHT - 1 - inset]


def _goal(elements: list[dict[str, Any]], target: int, text: str | None, kind: str) -> str:
    what = describe(elements[target])
    if text is not None:
        return f"Type '{text}' into the text field, then click {what}."
    if kind == "scroll":
        return f"Click {what}; it may be further down the page."
    return f"Click {what}."


def first_action(spec: dict[str, Any]) -> dict[str, Any]:
    """The first correct action on the first screen, in AgentFly's GUI fields: ``gt_action``,
    ``gt_bbox`` (``[x1, y1, x2, y2]`` screen pixels, [] without a point) and ``gt_input_text``."""
    target = spec["elements"][spec["target"]]
    if spec["text"] is not None:
        field = next(e for e in spec["elements"] if e["kind"] == "field")
        return {"gt_action": "click", "gt_bbox": list(field["box"]), "gt_input_text": ""}
    if target["box"][3] >= spec["height"]:
        return {"gt_action": "scroll", "gt_bbox": [], "gt_input_text": "down"}
    return {"gt_action": "click", "gt_bbox": list(target["box"]), "gt_input_text": ""}


def make_gui_tasks(
    n: int,
    split: str = "train",
    seed: int = 0,
    *,
    width: int = 112,
    height: int = 112,
    image_dir: str | Path | None = None,
    kinds: Sequence[str] = KINDS,
) -> list[dict[str, Any]]:
    """``n`` task rows of ``split`` (``train`` or ``heldout``).

    Args:
        n: how many rows.
        split: ``train`` or ``heldout``; the two never share a layout (:func:`layout_seed`).
        seed: the dataset's seed.
        width: the screen's width in pixels.
        height: the screen's height in pixels.
        image_dir: where the data file goes: each row's first screenshot is written to
            ``image_dir/screens/<task_id>.png`` and the row's ``images`` names it relatively.
        kinds: the kinds of task (of :data:`ALL_KINDS`), taken in turn.

    Returns:
        Rows with ``task_id``, ``split``, ``seed`` (the layout's), ``kind``, ``question`` (the
        goal and how to answer), ``goal``, ``screen`` (the page, the ``gui`` environment's task),
        ``gt_action``, ``gt_bbox``, ``gt_input_text`` and, with ``image_dir``, ``images``.
    """
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown or not kinds:
        raise ValueError(f"kinds are some of {', '.join(ALL_KINDS)}; got {list(kinds)}")
    rows = []
    for i in range(n):
        layout = layout_seed(seed, split, i)
        kind = kinds[i % len(kinds)]
        spec = make_screen(layout, width, height, kind)
        task_id = f"gui-{split}-{seed}-{i:05d}"
        row: dict[str, Any] = {
            "task_id": task_id, "split": split, "seed": layout, "kind": kind,
            "question": f"{spec['goal']} The screenshot is {width}x{height} pixels. {ACTION_HINT}",
            "goal": spec["goal"], "screen": spec, **first_action(spec),
        }
        if image_dir is not None:
            path = Path(image_dir) / "screens" / f"{task_id}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(render_png(spec))
            row["images"] = [f"screens/{task_id}.png"]
        rows.append(row)
    return rows


def write_gui_tasks(path: str | Path, n: int, split: str = "train", seed: int = 0, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`make_gui_tasks` written to ``path`` (a JSON list), screenshots beside it."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = make_gui_tasks(n, split, seed, image_dir=out.parent, **kwargs)
    out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Task rows for the gui environment.")
    parser.add_argument("--out", required=True, help="the JSON file to write (screens/ beside it)")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--split", choices=SPLITS, default="train")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--width", type=int, default=112)
    parser.add_argument("--height", type=int, default=112)
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of: {', '.join(ALL_KINDS)}")
    args = parser.parse_args(argv)
    rows = write_gui_tasks(args.out, args.n, args.split, args.seed, width=args.width,
                           height=args.height, kinds=tuple(args.kinds.split(",")))
    print(f"wrote {len(rows)} {args.split} rows to {args.out}")


if __name__ == "__main__":
    main()
