"""AgentFly's and verl's command lines and YAML files as LightningCLI arguments.

*verl keys* are the keys of verl's config (``data.*``, ``algorithm.*``, ``actor_rollout_ref.*``,
``critic.*``, ``trainer.*``) and of AgentFly's ``agent.*`` beside them: the keys AgentFly's
training scripts set. ``agentfly fit`` parses with LightningCLI (jsonargparse); those scripts
write their keys Hydra's way (``a.b=c``, ``+a.b=c``, ``~a.b``, ``a.l=[x,y]``, ``trainer.logger=['console','wandb']``), in
several spellings (``agent.max_turns`` and ``agent.run_config.max_turns``; the example scripts'
flat ``agent.tools``, ``agent.template``...), and their YAML files are sections of those keys.
:func:`to_cli_args` turns all of it into what LightningCLI reads, before it parses:

- every verl key given by a ``--config`` file (in order), then on the command line (Hydra words
  and ``--a.b[=]value`` flags alike, in order), is mapped to its canonical spelling
  (:mod:`agentfly.config.aliases`) and merged into one tree; a later source wins, two spellings
  of one key with different values in the same source are an error, ``~a.b`` returns a key to
  its default, and a key under a free-form mapping (``agent.init_config.tool_config.search.top_k``)
  merges into it. The tree goes to LightningCLI as the first ``--config``; LightningCLI types and
  checks its values.
- what is not a verl key (``--model.class_path``, ``--data.init_args.*``, ``--trainer.precision``,
  ``--trainer.callbacks+=...``, ``--ckpt_path``, ``--print_config``, ``--help``) is passed on as
  written, after it; keys of a LightningCLI config file (``--print_config``'s output) that are
  not verl keys stay in the tree as they are.
- an unknown key is refused here, naming the close matches.

When neither a config file nor ``data.train_files`` is given, the default task
(``conf/examples/demo_calculator.yaml``) is the first source: ``agentfly fit`` alone trains it.
"""

from __future__ import annotations

import difflib
import typing
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from agentfly.config.aliases import ALIASES, canonical_key
from agentfly.config.keys import lightning_trainer_names, takes, verl_key_table
from agentfly.config.overrides import parse_override
from agentfly.core.errors import ConfigError
from agentfly.modules.trainer_args import MANAGED, PLANNED_TRAINER_ARGS

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
DEFAULT_TASK_FILE = CONF_DIR / "examples" / "demo_calculator.yaml"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# ${pkg:demo/model} = a path inside the installed agentfly package, whatever the working directory
if not OmegaConf.has_resolver("pkg"):
    OmegaConf.register_new_resolver("pkg", lambda rel: str(PACKAGE_DIR / rel))

#: Keys AgentFly's scripts pass that have no job here (``+hydra.job.chdir=False``): accepted, unused.
IGNORED_NAMESPACES = ("hydra",)
_RESET = object()


class _Append(list):
    """Items a ``key+=...`` adds to a list key, after what earlier sources put there."""


class _Keys:
    """The verl keys (canonical), their types and defaults, and the names to suggest.

    The defaults are ``agentfly fit``'s; another command passes its own ``table`` (as
    :func:`agentfly.config.keys.verl_key_table` returns it), ``aliases``, the Trainer arguments
    it sets itself (``managed``: argument -> what to use instead) and ``elsewhere``: why a
    canonical key that is not its own is refused (None: unknown).
    """

    def __init__(
        self,
        table: tuple[dict[str, tuple[Any, Any]], frozenset[str]] | None = None,
        aliases: dict[str, str] | None = None,
        managed: dict[str, str] | None = None,
        elsewhere: Any = None,
    ) -> None:
        leaves, self.sections = table or verl_key_table()
        self.aliases = ALIASES if aliases is None else aliases
        self.leaves = {k: tp for k, (tp, _) in leaves.items()}
        self.defaults = {k: default for k, (_, default) in leaves.items()}
        self.open_nodes = {k for k, tp in self.leaves.items() if takes(tp, dict)}
        self.elsewhere = elsewhere
        self.lightning = {f"trainer.{n}" for n in lightning_trainer_names() - PLANNED_TRAINER_ARGS}
        self.managed = {f"trainer.{n}": instead for n, instead in (managed or MANAGED).items()}
        self.known = sorted({*self.leaves, *self.sections, *self.aliases, *self.lightning})
        # sections that exist only as a spelling (agent.init_config.backend_config)
        self.alias_sections = {".".join(a.split(".")[:i]) for a in self.aliases for i in range(1, a.count(".") + 1)}

    def canonical(self, key: str) -> str:
        """``key``'s canonical spelling under this command's aliases."""
        return canonical_key(key, None if self.aliases is ALIASES else self.aliases)

    def is_verl_key(self, key: str) -> bool:
        """A leaf, or a key inside a free-form mapping (``agent.init_config.tool_config.search``)."""
        parts = key.split(".")
        return key in self.leaves or any(".".join(parts[:i]) in self.open_nodes for i in range(1, len(parts)))

    def unknown(self, spelling: str, origin: str) -> str:
        why = self.elsewhere(self.canonical(spelling)) if self.elsewhere is not None else None
        if why:
            return f"{spelling} ({origin}): {why}"
        parent, _, last = spelling.rpartition(".")
        canon_parent = self.canonical(parent) if parent else ""
        children = sorted({k[len(canon_parent) + 1 :].split(".")[0] for k in self.known if k.startswith(canon_parent + ".")})
        hint = [f"{canon_parent}.{c}" for c in difflib.get_close_matches(last, children, n=3, cutoff=0.6)]
        hint += difflib.get_close_matches(spelling, self.known, n=3, cutoff=0.8)
        hint += [k for k in self.known if k.endswith("." + spelling)]
        hint = [k for k in dict.fromkeys(hint) if k != spelling][:3]
        did_you_mean = f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
        return f"unknown key {spelling!r} ({origin}){did_you_mean}"


@cache
def verl_keys() -> _Keys:
    return _Keys()


#: What LightningCLI reads besides verl's sections.
_LIGHTNING_ROOTS = ("model", "ckpt_path", "print_config", "config", "help")


def _passes_through(key: str, keys: _Keys) -> bool:
    """Keys LightningCLI reads itself: the model, the data module's class, Lightning's arguments."""
    parts = key.split(".")
    lightning = parts[0] in _LIGHTNING_ROOTS or ".".join(parts[:2]) in keys.lightning  # trainer.<argument>
    data = key.startswith(("data.class_path", "data.init_args", "data.dict_kwargs"))
    return not keys.is_verl_key(key) and (lightning or data)


class _Source:
    """One source's verl keys: ``{canonical key: value}`` in order, spellings checked.

    A config file's other keys (``model:``, ``trainer.precision``...) are merged into ``rest``.
    """

    def __init__(self, origin: str, rest: dict[str, Any] | None = None) -> None:
        self.origin, self.rest = origin, rest
        self.values: dict[str, Any] = {}
        self.spelled: dict[str, str] = {}
        self.errors: list[str] = []

    def set(self, spelling: str, value: Any, keys: _Keys, append: bool = False) -> None:
        key = keys.canonical(spelling)
        if key.split(".")[0] in IGNORED_NAMESPACES:
            return
        if self.rest is not None and _passes_through(key, keys):
            _merge(self.rest, key, value)
            return
        if key in keys.managed:
            self.errors.append(
                f"{spelling} ({self.origin}): agentfly sets this Trainer argument itself; use {keys.managed[key]}"
            )
            return
        if not keys.is_verl_key(key):
            if (key in keys.sections or spelling in keys.alias_sections) and isinstance(value, dict):
                for k, v in value.items():
                    self.set(f"{spelling}.{k}", v, keys)
                return
            self.errors.append(keys.unknown(spelling, self.origin))
            return
        tp = keys.leaves.get(key, Any)
        takes_list = takes(tp, list)
        if append:
            if not takes_list:
                self.errors.append(f"{spelling}+=... ({self.origin}): {key} is not a list")
                return
            value = _Append(value if isinstance(value, list) else [value])
        elif value is not _RESET:
            if takes_list and (value is None or isinstance(value, str)):  # data.train_files=x.json
                value = [] if value is None else [value]
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
    """(config files, pass-through args, the command line's verl keys)."""
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
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):  # --a.b value
                eq, text, i = "=", args[i + 1], i + 1
            append = name.endswith("+")
            canon = keys.canonical(name.rstrip("+"))
            if _passes_through(canon, keys) or (append and not keys.is_verl_key(canon)):
                passed.append(f"--{canon}{'+' if append else ''}{eq}{text}")
            elif not eq:
                raise ConfigError(f"--{name} needs a value")
            else:
                source.set(name.rstrip("+"), _flag_value(text), keys, append)
        elif not arg.startswith("-") and ("=" in arg or arg.startswith("~")):
            ov = parse_override(arg)
            value = _RESET if ov.kind == "delete" else ov.value
            if ov.is_sweep:  # a=x,y: one value, as text (a list key: split at the commas)
                value = ov.raw.split(",") if takes(keys.leaves.get(keys.canonical(ov.key)), list) else ov.raw
            if ov.kind != "delete" and _passes_through(keys.canonical(ov.key), keys):
                text = ov.raw if ov.raw else yaml.safe_dump(ov.value, default_flow_style=True).strip()
                passed.append(f"--{keys.canonical(ov.key)}{'+' if ov.kind == 'append' else ''}={text}")
            else:
                source.set(ov.key, value, keys, ov.kind == "append")
        else:
            passed.append(arg)
        i += 1
    return files, passed, source


def _put(tree: dict[str, Any], key: str, value: Any, keys: _Keys) -> None:
    """One source's setting of ``key`` over what earlier sources put in ``tree``."""
    *path, last = key.split(".")
    node = tree
    for part in path:
        if value is _RESET and not isinstance(node.get(part), dict):
            return  # nothing there to reset
        node = node.setdefault(part, {})
    if value is _RESET:
        node.pop(last, None)
    elif isinstance(value, _Append):
        node[last] = [*(node.get(last, keys.defaults.get(key)) or []), *value]
    elif key in keys.open_nodes and isinstance(value, dict) and isinstance(node.get(last), dict):
        node[last] = {**node[last], **value}
    else:
        _merge(node, last, value)


def to_cli_args(
    args: list[str], *, default_task: bool = True, keys: _Keys | None = None,
    default_file: Path = DEFAULT_TASK_FILE,
) -> tuple[list[str], set[str]]:
    """The LightningCLI arguments for ``args`` (after the subcommand), and the verl keys set.

    ``keys``: another command's keys (None: ``agentfly fit``'s); ``default_file``: the task a
    command line naming neither a file nor ``data.train_files`` runs when ``default_task``.

    Raises:
        ConfigError: unknown keys (with close matches), a key with two values in one source,
            an unreadable or missing config file.
    """
    keys = keys or verl_keys()
    files, passed, cli = _command_line(list(args), keys)
    names_data = "data.train_files" in cli.values or any(a.startswith("--data.init_args.train_files") for a in passed)
    if default_task and not files and not names_data:
        files = [str(default_file)]
    rest: dict[str, Any] = {}
    sources = []
    for path in map(find_file, files):
        sources.append(_Source(f"file {path.name}", rest))
        for name, value in _read_yaml(path).items():
            sources[-1].set(name, value, keys)
    sources.append(cli)
    errors = [e for s in sources for e in s.errors]
    if errors:
        raise ConfigError(errors)
    # what the user set: every key of the command line, a file's keys away from their defaults
    # (a file printed by --print_config holds every key), less what the command line reset
    explicit = {k for k, v in cli.values.items() if k in keys.leaves and v is not _RESET} | {
        k for src in sources[:-1] for k, v in src.values.items()
        if k in keys.leaves and v != keys.defaults[k] and cli.values.get(k) is not _RESET
    }
    tree: dict[str, Any] = {}
    for source in sources:
        for key, value in source.values.items():
            _put(tree, key, value, keys)
    for key, value in rest.items():
        _merge(tree, key, value)
    config = yaml.safe_dump(tree, sort_keys=False) if tree else None
    return ([f"--config={config}"] if config else []) + passed, explicit


def parse_error(exc: Exception) -> str:
    """jsonargparse's message as one line: the dotted key, what it expects and the value given
    (its nested account of every Union member tried is left out); the message as it is when it
    names no key.

    A subclass-mode group nests its keys (``Parser key "data": ... Parser key "truncation":``);
    the line joins them (``data.truncation``).
    """
    import re

    text = str(exc)
    keys = [k for k in re.findall(r'Parser key "([^"]+)"', text) if k not in ("init_args", "dict_kwargs")]
    expects = re.findall(r"^\s*-?\s*((?:Expected|Not of type|Does not|Unrecognized|Key)[^\n]*)", text, re.M)
    given = re.findall(r"Given value: ([^\n]*)", text) or re.findall(r"Got value: ([^\n]*)", text)
    if not keys or not expects:
        return text
    detail = next((e for e in expects if not e.startswith("Does not validate")), expects[0])
    detail = re.sub(r"<class '(?:builtins\.)?([\w.]+)'>", r"\1", detail)
    detail = re.sub(r"a typing\.Literal\[(.*?)\]", r"one of \1", detail)
    shown = "Got value" in detail or detail.startswith("Not of type") or not given
    value = "" if shown else f" (given {given[0]})"
    return f"{'.'.join(keys)}: {detail}{value}"
