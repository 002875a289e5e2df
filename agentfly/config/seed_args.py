"""The seeds' command lines and YAML files as LightningCLI arguments.

``agentfly fit`` parses with LightningCLI (jsonargparse). The seeds write their keys Hydra's way
(``a.b=c``, ``+a.b=c``, ``~a.b``, ``a.l=[x,y]``, ``trainer.logger=['console','wandb']``), in
several spellings (``agent.max_turns`` and ``agent.run_config.max_turns``; the example scripts'
flat ``agent.tools``, ``agent.template``...), and their YAML files are sections of those keys.
:func:`to_cli_args` turns all of it into what LightningCLI reads, before it parses:

- every seed key given by a ``--config`` file (in order), then on the command line (Hydra words
  and ``--a.b[=]value`` flags alike, in order), is mapped to its canonical spelling
  (:mod:`agentfly.config.aliases`) and merged into one tree; a later source wins, two spellings
  of one key with different values in the same source are an error, ``~a.b`` returns a key to
  its default, and a key under a free-form mapping (``agent.init_config.tool_config.search.top_k``)
  merges into it. The tree goes to LightningCLI as the first ``--config``.
- what is not a seed key (``--model.class_path``, ``--data.init_args.*``, ``--trainer.precision``,
  ``--trainer.callbacks+=...``, ``--ckpt_path``, ``--print_config``, ``--help``) is passed on as
  written, after it; keys of a LightningCLI config file (``--print_config``'s output) that are
  not seed keys stay in the tree as they are.
- an unknown key is refused here, naming the close matches.

When neither a config file nor ``data.train_files`` is given, the default task
(``conf/examples/demo_calculator.yaml``) is the first source: ``agentfly fit`` alone trains it.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from agentfly.config.aliases import canonical_key, is_alias_prefix, spellings
from agentfly.config.keys import is_dict_type, is_list_type, seed_key_table, strip_optional
from agentfly.config.overrides import parse_override
from agentfly.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
DEFAULT_TASK_FILE = CONF_DIR / "examples" / "demo_calculator.yaml"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# ${pkg:demo/model} = a path inside the installed agentfly package, whatever the working directory
if not OmegaConf.has_resolver("pkg"):
    OmegaConf.register_new_resolver("pkg", lambda rel: str(PACKAGE_DIR / rel))

#: Keys the seeds pass that have no job here (``+hydra.job.chdir=False``): accepted, unused.
IGNORED_NAMESPACES = ("hydra",)
_RESET = object()


class _Keys:
    """The seed keys (canonical), their types and defaults, and the names to suggest."""

    def __init__(self) -> None:
        table, self.sections = seed_key_table()
        self.leaves = {k: tp for k, (tp, _) in table.items()}
        self.defaults = {k: default for k, (_, default) in table.items()}
        self.open_nodes = {k for k, tp in self.leaves.items() if is_dict_type(tp)}
        import lightning.pytorch as pl

        from agentfly.trainer import MANAGED, PLANNED_TRAINER_ARGS

        names = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}
        self.lightning = {f"trainer.{n}" for n in names - PLANNED_TRAINER_ARGS}
        self.managed = {f"trainer.{n}": instead for n, instead in MANAGED.items()}
        self.known = sorted({*self.leaves, *self.sections, *spellings(), *self.lightning})

    def is_seed_key(self, key: str) -> bool:
        return key in self.leaves or self.open_ancestor(key) is not None

    def open_ancestor(self, key: str) -> str | None:
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:i]) in self.open_nodes:
                return ".".join(parts[:i])
        return None

    def default(self, key: str) -> Any:
        return self.defaults[key]

    def unknown(self, spelling: str, origin: str) -> str:
        parent, _, last = spelling.rpartition(".")
        canon_parent = canonical_key(parent) if parent else ""
        children = sorted({k[len(canon_parent) + 1 :].split(".")[0] for k in self.known if k.startswith(canon_parent + ".")})
        hint = [f"{canon_parent}.{c}" for c in difflib.get_close_matches(last, children, n=3, cutoff=0.6)]
        hint += difflib.get_close_matches(spelling, self.known, n=3, cutoff=0.8)
        hint += [k for k in self.known if k.endswith("." + spelling)]
        hint = [k for k in dict.fromkeys(hint) if k != spelling][:3]
        did_you_mean = f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
        return f"unknown key {spelling!r} ({origin}){did_you_mean}"


@cache
def seed_keys() -> _Keys:
    return _Keys()


#: What LightningCLI reads besides the seeds' sections.
_LIGHTNING_ROOTS = ("model", "ckpt_path", "print_config", "config", "help")


def _passes_through(key: str, keys: _Keys) -> bool:
    """Keys LightningCLI reads itself: the model, the data module's class, Lightning's arguments."""
    if keys.is_seed_key(key):
        return False
    if key in keys.lightning or any(key.startswith(k + ".") for k in keys.lightning):
        return True
    if key.split(".")[0] in _LIGHTNING_ROOTS:
        return True
    return key.startswith(("data.class_path", "data.init_args", "data.dict_kwargs"))


def _typed_for(key: str, value: Any, keys: _Keys) -> Any:
    """A single path where the key takes a list is a one-item list (``data.train_files=x.json``),
    null an empty one."""
    tp = strip_optional(keys.leaves.get(key, Any))
    if is_list_type(tp) and isinstance(value, str):
        return [value]
    if is_list_type(tp) and value is None:
        return []
    return value


class _Source:
    """One source's seed keys: ``{canonical key: value}`` in order, spellings checked."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.values: dict[str, Any] = {}
        self.spelled: dict[str, str] = {}
        self.errors: list[str] = []

    def set(self, spelling: str, value: Any, keys: _Keys) -> None:
        key = canonical_key(spelling)
        if key.split(".")[0] in IGNORED_NAMESPACES:
            return
        if key in keys.managed:
            self.errors.append(
                f"{spelling} ({self.origin}): agentfly sets this Trainer argument itself; use {keys.managed[key]}"
            )
            return
        if not keys.is_seed_key(key):
            if key in keys.sections and isinstance(value, dict):
                for k, v in value.items():
                    self.set(f"{spelling}.{k}", v, keys)
                return
            if is_alias_prefix(spelling) and isinstance(value, dict):
                for k, v in value.items():
                    self.set(f"{spelling}.{k}", v, keys)
                return
            self.errors.append(keys.unknown(spelling, self.origin))
            return
        if isinstance(value, tuple) and value[:1] == ("__append__",):
            if not is_list_type(strip_optional(keys.leaves.get(key, Any))):
                self.errors.append(f"{spelling}+=... ({self.origin}): {key} is not a list")
                return
        elif value is not _RESET:
            value = _typed_for(key, value, keys)
            tp = keys.leaves.get(key, Any)
            if value is None and tp is not Any and type(None) not in typing.get_args(tp):
                # a null in a config file skips jsonargparse's type check: refused here
                self.errors.append(f"{spelling}=null ({self.origin}): {key} takes a {tp.__name__ if isinstance(tp, type) else tp}, not null")
                return
        earlier = self.spelled.get(key)
        if earlier is not None and earlier != spelling and self.values[key] != value:
            self.errors.append(
                f"{earlier}={self.values[key]!r} and {spelling}={value!r} ({self.origin}) are one "
                f"key ({key}) with two values; give one"
            )
        self.values.pop(key, None)  # a later setting comes later in the order
        self.values[key] = value
        self.spelled[key] = spelling


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections")
    return _resolved(data)  # type: ignore[no-any-return]


def _resolved(node: Any) -> Any:
    """``${pkg:...}`` and ``${oc.env:...}`` resolved now; ``${a.b}`` (another key) is left for
    when the tree is composed."""
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(node, dict):
        return {k: _resolved(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolved(v) for v in node]
    if isinstance(node, str) and "${" in node:
        try:
            return OmegaConf.create({"v": node}).v
        except OmegaConfBaseException:
            return node
    return node


def find_file(config_file: str | Path) -> Path:
    """A config file by path, or relative to the repository (``conf/examples/x.yaml``)."""
    path = Path(config_file).expanduser()
    if path.is_file():
        return path
    beside_repo = CONF_DIR.parent / path
    if not path.is_absolute() and beside_repo.is_file():
        return beside_repo
    raise ConfigError(f"config file {str(config_file)!r} not found")


def _file_source(path: Path, keys: _Keys, rest: dict[str, Any]) -> _Source:
    """A YAML file's seed keys; the rest (``model:``, ``trainer.precision``...) merges into ``rest``."""
    source = _Source(f"file {path.name}")

    def walk(prefix: str, node: Any) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            canon = canonical_key(key)
            if _passes_through(canon, keys):
                _merge(rest, canon, value)
            elif (canon in keys.sections or is_alias_prefix(key)) and isinstance(value, dict) and not keys.is_seed_key(canon):
                walk(key + ".", value)
            else:
                source.set(key, value, keys)

    walk("", _read_yaml(path))
    return source


def _merge(tree: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
        for k, v in value.items():
            _merge(node[parts[-1]], k, v)
    else:
        node[parts[-1]] = value


def _flag_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _command_line(args: list[str], keys: _Keys) -> tuple[list[str], list[str], _Source]:
    """(config files, pass-through args, the command line's seed keys)."""
    files: list[str] = []
    passed: list[str] = []
    source = _Source("command line")
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--config", "-c") or arg.startswith(("--config=", "-c=")):
            if "=" in arg:
                files.append(arg.split("=", 1)[1])
            elif i + 1 < len(args):
                files.append(args[i + 1])
                i += 1
            else:
                raise ConfigError(f"{arg} needs a file")
        elif arg.startswith("--") and "." in arg.split("=", 1)[0]:
            name, eq, text = arg[2:].partition("=")
            takes_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("--")
            append = name.endswith("+")
            canon = canonical_key(name.rstrip("+"))
            if _passes_through(canon, keys) or (append and not keys.is_seed_key(canon)):
                flag = f"--{canon}{'+' if append else ''}"
                passed += [f"{flag}={text}"] if eq else [flag] + ([args[i + 1]] if takes_next else [])
                i += 1 + int(takes_next and not eq)
                continue
            if not eq and not takes_next:
                raise ConfigError(f"--{name} needs a value")
            value = _flag_value(text if eq else args[i + 1])
            i += int(not eq)
            _set_word(source, name.rstrip("+"), value, append, keys)
        elif not arg.startswith("-") and ("=" in arg or arg.startswith("~")):
            ov = parse_override(arg)
            if ov.kind == "delete":
                source.set(ov.key, _RESET, keys)
            else:
                value = ov.value
                if ov.is_sweep:  # a=x,y: one value, as text (a list key: split at the commas)
                    tp = strip_optional(keys.leaves.get(canonical_key(ov.key), Any))
                    value = ov.raw.split(",") if is_list_type(tp) else ov.raw
                if _passes_through(canonical_key(ov.key), keys) and not ov.key.startswith("hydra"):
                    text = ov.raw if ov.raw else yaml.safe_dump(ov.value, default_flow_style=True).strip()
                    passed.append(f"--{canonical_key(ov.key)}{'+' if ov.kind == 'append' else ''}={text}")
                else:
                    _set_word(source, ov.key, value, ov.kind == "append", keys)
        else:
            passed.append(arg)
        i += 1
    return files, passed, source


def _set_word(source: _Source, spelling: str, value: Any, append: bool, keys: _Keys) -> None:
    if append:  # key+=x: after what earlier sources put there (resolved in to_cli_args)
        source.set(spelling, ("__append__", value if isinstance(value, list) else [value]), keys)
    else:
        source.set(spelling, value, keys)


def to_cli_args(args: list[str], *, default_task: bool = True) -> tuple[list[str], set[str]]:
    """The LightningCLI arguments for ``args`` (after the subcommand), and the seed keys set.

    Raises:
        ConfigError: unknown keys (with close matches), a key with two values in one source,
            an unreadable or missing config file.
    """
    keys = seed_keys()
    files, passed, cli = _command_line(list(args), keys)
    if default_task and not files and "data.train_files" not in cli.values and not _names_data(passed):
        files = [str(DEFAULT_TASK_FILE)]
    rest: dict[str, Any] = {}
    sources = [_file_source(find_file(f), keys, rest) for f in files] + [cli]
    errors = [e for s in sources for e in s.errors]
    if errors:
        raise ConfigError(errors)
    merged: dict[str, Any] = {}
    for source in sources:
        for key, value in source.values.items():
            anchor = keys.open_ancestor(key)
            if value is _RESET:
                if anchor is None:
                    merged.pop(key, None)
                else:
                    _drop(merged, anchor, key[len(anchor) + 1 :])
                continue
            if isinstance(value, tuple) and value[:1] == ("__append__",):
                base = merged.get(key, keys.default(key)) or []
                value = [*base, *value[1]]
            if anchor is not None and anchor not in merged:
                merged[anchor] = {}
            if anchor is not None:
                sub = merged[anchor] = dict(merged[anchor] or {})
                _merge(sub, key[len(anchor) + 1 :], value)
            elif key in keys.open_nodes and isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    tree: dict[str, Any] = {}
    for key, value in merged.items():
        _merge(tree, key, value)
    for key, value in rest.items():
        _merge(tree, key, value)
    config = yaml.safe_dump(tree, sort_keys=False) if tree else None
    # what the user set: every key of the command line, a file's keys away from their defaults
    # (a file printed by --print_config holds every key)
    explicit = set(cli.values) | {
        k for src in sources[:-1] for k, v in src.values.items() if k in keys.leaves and v != keys.default(k)
    }
    return ([f"--config={config}"] if config else []) + passed, explicit & set(merged)


def _drop(merged: dict[str, Any], anchor: str, sub: str) -> None:
    """Remove ``sub`` (dotted) from the free-form mapping at ``anchor``."""
    import copy

    node = merged[anchor] = copy.deepcopy(merged.get(anchor) or {})
    *path, last = sub.split(".")
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(last, None)


def _names_data(passed: list[str]) -> bool:
    return any(a.startswith("--data.init_args.train_files") for a in passed)
