"""Hydra composition of ``conf/`` into the typed ``TalentRLConfig``.

The schema (``talentrl_core.config``) is registered with Hydra's ConfigStore; a wrong key or value fails
at compose time with a ``ConfigError`` naming the key and the allowed choices. The library receives a
plain dataclass (``OmegaConf.to_object``), never an OmegaConf object.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from enum import Enum
from pathlib import Path
from typing import Sequence

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from talentrl_core.config import TalentRLConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("env", "model", "library", "collect", "sft", "rl", "eval", "experiment")

cs = ConfigStore.instance()
cs.store(name="talentrl_schema", node=TalentRLConfig)


class ConfigError(ValueError):
    """A config that does not compose or validate; the message names the key and the choices."""


def refuse(err: Exception) -> int:
    """The command lines' answer to a config that does not compose: ``config error: …`` on stderr, exit code 2."""
    print(f"config error: {err}", file=sys.stderr)
    return 2


def _fields_of(path: str) -> list[str] | None:
    """The valid field names at a dotted path of the schema (None if the path itself is unknown)."""
    cls = TalentRLConfig
    for part in [p for p in path.split(".") if p]:
        f = {f.name: f for f in dataclasses.fields(cls)}.get(part)
        if f is None or not dataclasses.is_dataclass(f.default_factory() if callable(f.default_factory) else None):
            return None
        cls = type(f.default_factory())
    return [f.name for f in dataclasses.fields(cls)]


def _is_mapping(path: str) -> bool:
    """Whether the dotted path is a dict-valued field of the schema (its keys are data, not config keys)."""
    f = _field(path)
    return f is not None and callable(f.default_factory) and isinstance(f.default_factory(), dict)


def _group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _field(path: str) -> dataclasses.Field | None:
    """The schema's field at a dotted path (``eval.n_by_panel``), or None when the path is no field."""
    section, _, leaf = path.rpartition(".")
    if _fields_of(section) is None:
        return None
    cls = TalentRLConfig
    for part in [p for p in section.split(".") if p]:
        cls = type({f.name: f for f in dataclasses.fields(cls)}[part].default_factory())
    return {f.name: f for f in dataclasses.fields(cls)}.get(path.rpartition(".")[2])


def accepted_forms(key: str) -> str:
    """How a list- or dict-valued field is given on the command line ('' for any other key).

    >>> accepted_forms("eval.panels")
    'eval.panels is a list (list[str]): give eval.panels=[a,b,...]'
    >>> accepted_forms("eval.n_by_panel").split(": ")[0], accepted_forms("sft.lr")
    ('eval.n_by_panel is a mapping (dict[str, int])', '')
    """
    f = _field(key)
    kind = type(f.default_factory()) if f is not None and callable(f.default_factory) else None
    if kind is dict:
        return f"{key} is a mapping ({f.type}): give {key}={{name: value, ...}}, {key}.name=value or +{key}.name=value"
    if kind is list:
        return f"{key} is a list ({f.type}): give {key}=[a,b,...]"
    return ""


def _explain_merge(msg: str, cause: str) -> str | None:
    """``Error merging override k=v`` with OmegaConf's cause: the key, the value and what it accepts."""
    mo, mk = re.search(r"Error merging override (\S+?)=(.*)", msg), re.search(r"full_key: ([\w.]+)", cause)
    if not mo or not mk:
        return None
    key, value = mk.group(1), mo.group(2)
    if "incompatible container types" in cause:
        forms = accepted_forms(key) or accepted_forms(key.rpartition(".")[0])
        return f"{key}={value}: the wrong kind of value; {forms}" if forms else None
    conv = re.search(r"(Value '.*' of type '\w+' could not be converted to \w+)", cause)
    return f"{key}={value}: {conv.group(1)}" if conv else None


def _explain(err: Exception, overrides: Sequence[str]) -> str:
    msg = str(err)
    merged = _explain_merge(msg, str(err.__cause__ or ""))
    if merged:
        return merged
    m = re.search(r"Key '([^']+)' (?:is )?not in (?:struct|'?(\w+)'?)", msg) or re.search(
        r"Could not override '([^']+)'", msg
    )
    full_key = None
    mk = re.search(r"full_key: ([\w.]+)", msg)
    if mk:
        full_key = mk.group(1)
    elif m:
        full_key = m.group(1)
    if full_key:
        parent, _, leaf = full_key.rpartition(".")
        if parent in GROUPS or parent == "" and leaf in GROUPS:
            pass
        choices = _fields_of(parent)
        if choices is not None and leaf not in choices:
            return f"unknown config key '{full_key}'; valid keys of '{parent or '<root>'}': {', '.join(choices)}"
        forms = accepted_forms(full_key) or accepted_forms(parent)
        if forms and "Could not override" in msg:
            return f"could not override '{full_key}'; {forms}"
    ma = re.search(r"An item is already at '([^']+)'", msg)
    if ma:
        key = ma.group(1)
        o = next((o for o in overrides if o.startswith("+") and o.lstrip("+").partition("=")[0].strip() == key), "")
        value = o.partition("=")[2]
        return (f"{o or '+' + key}: {key} is already in the config and a single + only adds new keys; "
                f"write {key}={value} (or ++{key}={value})")
    mg = re.search(r"Could not find '(\w+)/(\w+)'", msg) or re.search(r"In '(\w+)': Could not find '(\w+)'", msg)
    if mg and mg.group(1) in GROUPS:
        return f"unknown choice '{mg.group(2)}' for config group '{mg.group(1)}'; choices: {', '.join(_group_choices(mg.group(1)))}"
    for o in overrides:
        g, _, v = o.partition("=")
        if g in GROUPS and v and v not in _group_choices(g) and v != "null":
            return f"unknown choice '{v}' for config group '{g}'; choices: {', '.join(_group_choices(g))}"
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    detail = [ln.strip() for ln in lines if "expected one of" in ln or "Value '" in ln]
    opts = re.search(r"Available options in '([^']+)':\n(.*?)(?:\nConfig search path|$)", msg, re.DOTALL)
    if opts:  # a group of Hydra's own (hydra/launcher=nope): its choices
        detail.append(f"choices of {opts.group(1)}: {', '.join(opts.group(2).split())}")
    cause = str(err.__cause__) if err.__cause__ else ""
    detail += [ln.strip() for ln in cause.splitlines() if "expected one of" in ln]
    return "; ".join(dict.fromkeys(lines[:1] + detail)) if lines else type(err).__name__


def _in_mapping(key: str) -> bool:
    """Whether ``key`` is a dict field of the schema (``eval.n_by_panel``) or one entry of it."""
    return _is_mapping(key) or _is_mapping(key.rpartition(".")[0])


def open_mappings(args: Sequence[str]) -> list[str]:
    """``eval.n_by_panel={a: 1}`` and ``eval.n_by_panel.a=1`` as ``++…``: a dict field starts empty and closed in the
    schema, so Hydra refuses a plain override of it ("Could not override"); ``++`` merges the entries into it, as a
    plain override of a dict does. Every other argument is returned as it is.

    >>> open_mappings(["eval.n_by_panel={webshop: 30}", "eval.n_by_panel.qa_nq=5", "sft.lr=1e-3", "-m"])
    ['++eval.n_by_panel={webshop: 30}', '++eval.n_by_panel.qa_nq=5', 'sft.lr=1e-3', '-m']
    """
    out = []
    for a in args:
        key, eq, _ = a.partition("=")
        out.append(f"++{a}" if eq and key and key[0] not in "+~-" and _in_mapping(key.strip()) else a)
    return out


def compose(overrides: Sequence[str] = (), config_dir: Path | None = None, job_name: str = "app", hydra: bool = False):
    """``conf/`` (or ``config_dir``) composed with ``overrides`` by Hydra, as an OmegaConf node (with ``hydra``, its
    ``hydra.*`` settings too); a config that does not compose raises ``ConfigError``. The one place Hydra composes."""
    overrides = list(open_mappings(overrides))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir or CONF_DIR), job_name=job_name):
            return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=hydra)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_explain(e, overrides)) from e
    finally:
        GlobalHydra.instance().clear()


def to_config(node, source: str = "") -> TalentRLConfig:
    """The validated ``TalentRLConfig`` of a composed node: interpolations (``${data_dir}``, ``${artifacts_dir}``)
    resolved by OmegaConf, plain dataclasses out. Errors name ``source`` (a file) and the key. The one conversion
    every loader (``load_config``, ``config_from_values``, a Hydra job) goes through."""
    where = f"{source}: " if source else ""
    try:
        obj = OmegaConf.to_object(node)
    except OmegaConfBaseException as e:
        raise ConfigError(where + _explain(e, [])) from e
    except ValueError as e:  # __post_init__ cross-field checks
        raise ConfigError(where + str(e)) from e
    assert isinstance(obj, TalentRLConfig)
    return obj


def hydra_output_dir(stage: str, overrides: Sequence[str], multirun: bool) -> Path:
    """Hydra's run folder for these overrides (``hydra.run.dir``, with ``multirun`` ``hydra.sweep.dir``)."""
    cfg = compose(overrides, job_name=stage, hydra=True)
    return Path(str(OmegaConf.select(cfg, "hydra.sweep.dir" if multirun else "hydra.run.dir")))


def check_added_keys(overrides: Sequence[str]) -> None:
    """``+key=value`` / ``++key=value`` may only name keys the schema has (Hydra would add a new key silently);
    ``+group=option`` for a config group stays allowed."""
    for o in overrides:
        if not o.startswith("+"):
            continue
        key = o.lstrip("+").partition("=")[0].strip()
        if key in GROUPS:
            continue
        parent, _, leaf = key.rpartition(".")
        if _is_mapping(parent):  # a dict field (eval.n_by_panel): new keys are its data
            continue
        choices = _fields_of(parent)
        if choices is None or leaf not in choices:
            where = f"valid keys of '{parent or '<root>'}': {', '.join(choices)}" if choices else f"'{parent}' is not a config section"
            raise ConfigError(f"unknown config key '{key}' in override {o!r}; {where}")


def load_config(overrides: Sequence[str] = (), config_dir: Path | None = None) -> TalentRLConfig:
    """Compose ``conf/`` with Hydra overrides into a validated ``TalentRLConfig`` (plain dataclasses)."""
    overrides = open_mappings(overrides)
    check_added_keys(overrides)
    return to_config(compose(overrides, config_dir))


def config_from_values(values: dict, source: str) -> TalentRLConfig:
    """A validated ``TalentRLConfig`` from plain values (a params.yaml), merged onto the schema's defaults; errors
    name ``source`` and the key."""
    try:
        node = OmegaConf.merge(OmegaConf.structured(TalentRLConfig), values)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{source}: {_explain(e, [])}") from e
    return to_config(node, source)


def differences(a: TalentRLConfig, b: TalentRLConfig) -> dict[str, tuple]:
    """``{dotted key: (a's value, b's value)}`` where two configs differ."""

    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
        return out

    fa, fb = flat(to_plain(a)), flat(to_plain(b))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


def to_plain(obj) -> dict:
    """A JSON-able dict of a config dataclass (enums as their values), for logs and metadata."""

    def conv(v):
        if isinstance(v, Enum):
            return v.value
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v

    return conv(obj)
