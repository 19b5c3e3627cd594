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

from hydra import compose, initialize_config_dir
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
    section, _, leaf = path.rpartition(".")
    if not leaf or _fields_of(section) is None:
        return False
    cls = TalentRLConfig
    for part in [p for p in section.split(".") if p]:
        cls = type({f.name: f for f in dataclasses.fields(cls)}[part].default_factory())
    f = {f.name: f for f in dataclasses.fields(cls)}.get(leaf)
    return f is not None and callable(f.default_factory) and isinstance(f.default_factory(), dict)


def _group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _explain(err: Exception, overrides: Sequence[str]) -> str:
    msg = str(err)
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
    mg = re.search(r"Could not find '(\w+)/(\w+)'", msg) or re.search(r"In '(\w+)': Could not find '(\w+)'", msg)
    if mg and mg.group(1) in GROUPS:
        return f"unknown choice '{mg.group(2)}' for config group '{mg.group(1)}'; choices: {', '.join(_group_choices(mg.group(1)))}"
    for o in overrides:
        g, _, v = o.partition("=")
        if g in GROUPS and v and v not in _group_choices(g) and v != "null":
            return f"unknown choice '{v}' for config group '{g}'; choices: {', '.join(_group_choices(g))}"
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    detail = [ln.strip() for ln in lines if "expected one of" in ln or "Value '" in ln]
    cause = str(err.__cause__) if err.__cause__ else ""
    detail += [ln.strip() for ln in cause.splitlines() if "expected one of" in ln]
    return "; ".join(dict.fromkeys(lines[:1] + detail)) if lines else type(err).__name__


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
    check_added_keys(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir or CONF_DIR)):
            cfg = compose(config_name="config", overrides=list(overrides))
        obj = OmegaConf.to_object(cfg)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_explain(e, overrides)) from e
    except ValueError as e:  # __post_init__ cross-field checks
        raise ConfigError(str(e)) from e
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(obj, TalentRLConfig)
    return obj


def config_from_values(values: dict, source: str) -> TalentRLConfig:
    """A validated ``TalentRLConfig`` from plain values (a params.yaml), merged onto the schema's defaults; errors
    name ``source`` and the key."""
    try:
        obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TalentRLConfig), values))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{source}: {_explain(e, [])}") from e
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from e
    assert isinstance(obj, TalentRLConfig)
    return obj


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
