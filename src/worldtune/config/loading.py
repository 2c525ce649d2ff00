"""Loading a config (TOML file + command-line overrides), describing its fields and writing it back as TOML."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from worldtune.config.root import WorldtuneConfig
from worldtune.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _parse_value(text: str) -> Any:
    """A command-line value: TOML/JSON literal if it parses (numbers, bools, lists), else a string."""
    for parse in (lambda s: tomllib.loads(f"v = {s}")["v"], json.loads):
        try:
            return parse(text)
        except Exception:
            pass
    if text.lower() in ("none", "null"):
        return None
    return text


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """`--a.b 1 --c=x` -> {"a": {"b": 1}, "c": "x"}."""
    tree: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}': overrides look like --section.key value")
        key = arg[2:]
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ConfigError(f"override '{arg}' has no value")
            raw = args[i + 1]
            i += 2
        node = tree
        parts = key.replace("-", "_").split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        value = _parse_value(raw)
        node[parts[-1]] = _Whole(value) if isinstance(value, dict) else value
    return tree


class _Whole(dict):
    """A table given whole on the command line (`--prepare.cameras '{video="video"}'`): it replaces the
    file's table instead of merging into it, or a 4-camera recipe would keep its other 3 cameras."""


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and not isinstance(v, _Whole) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)  # a dotted key: into the table
        else:
            out[k] = dict(v) if isinstance(v, dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> WorldtuneConfig:
    """Read a TOML config (or none), apply dotted overrides, validate.

    An error names where the offending value came from (the file, the command line, or the
    defaults) and its dotted key; an unknown key gets the closest known one as a suggestion.
    """
    data: dict[str, Any] = {}
    where = "defaults"
    if path is not None:
        p = Path(path)
        where = str(p)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist: pass a TOML file (see configs/)")
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: not valid TOML ({e})") from None
    tree = parse_overrides(overrides) if overrides else {}
    from_file = data
    data = _merge(data, tree)
    try:
        return WorldtuneConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        cli = _has_path(tree, loc) and (len(loc) > 1 or not _has_path(from_file, loc))
        origin = "command line" if cli else where
        key = ".".join(loc)
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"{origin}: unknown key {key}{_suggestion(loc)}") from None
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{origin}: {key}: {msg}" if key else f"{origin}: {msg}") from None


def _has_path(tree: dict[str, Any], loc: list[str]) -> bool:
    node: Any = tree
    for part in loc:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _suggestion(loc: list[str]) -> str:
    """"; did you mean `train.steps`?" for a mistyped key, from the fields of the section it was given in."""
    import difflib

    model: type[BaseModel] = WorldtuneConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        sub = field.annotation if field else None
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            return ""
        model = sub
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    if close:
        return f"; did you mean `{'.'.join([*loc[:-1], close[0]])}`?"
    return "; `--print-config` shows every key"


# ------------------------------------------------------------------------------ describing and dumping
def describe_fields(model: type[BaseModel], prefix: str) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) of every field of a section, nested sections expanded.

    The source of `--help`'s key listing: generic over sections, so a new section or field shows
    up without touching the CLI.
    """
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            rows += describe_fields(sub, key)
            continue
        if field.is_required():
            default = "(required)"
        else:
            value = field.get_default(call_default_factory=True)
            default = "none" if value is None else f"{value:.4g}" if isinstance(value, float) and len(repr(value)) > 8 \
                else _inline(_jsonable(value))
        rows.append((key, _type_name(sub), default, field.description or ""))
    return rows


def _type_name(annotation: Any) -> str:
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if annotation is type(None):
        return "none"
    if args:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is Ellipsis:
        return "..."
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def dump_config(cfg: BaseModel, sections: list[str] | None = None) -> str:
    """The resolved config as TOML with `[section]` headers (what `--print-config` shows and run folders store).

    Every key is listed; an unset (None) key appears as a comment, since TOML has no null. The text
    loads back with `load_config` to the same config. A whole `WorldtuneConfig` is dumped section by
    section (`sections` picks some); any other model is dumped under its own name's section.
    """
    lines: list[str] = []
    if isinstance(cfg, WorldtuneConfig):
        for name in sections or list(WorldtuneConfig.model_fields):
            _table(lines, name, getattr(cfg, name))
    else:
        owner = next((n for n, f in WorldtuneConfig.model_fields.items() if f.annotation is type(cfg)), None)
        if owner is None:
            raise ValueError(f"{type(cfg).__name__} is not a section of WorldtuneConfig")
        _table(lines, owner, cfg)
    return "\n".join(lines).strip() + "\n"


def _table(lines: list[str], path: str, model: BaseModel) -> None:
    if lines:
        lines.append("")
    lines.append(f"[{path}]")
    nested = []
    data = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            nested.append((name, value))
        elif data[name] is None and field.get_default(call_default_factory=True) is not None:
            lines.append(f'{_key(name)} = "none"')  # None chosen over a default: say so explicitly
        elif data[name] is None:
            lines.append(f"# {name} = (unset; {_type_name(field.annotation)})")
        else:
            lines.append(f"{_key(name)} = {_inline(data[name])}")
    for name, value in nested:
        _table(lines, f"{path}.{name}", value)


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


def _key(k: Any) -> str:
    k = str(k)
    return k if k and all(c.isalnum() or c in "-_" for c in k) else json.dumps(k)


def _inline(value: Any) -> str:
    """A TOML value on one line (inline tables for dicts; None entries dropped: TOML has no null)."""
    import tomli_w

    if isinstance(value, dict):
        items = [f"{_key(k)} = {_inline(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value if v is not None) + "]"
    return tomli_w.dumps({"v": value})[4:].strip()
