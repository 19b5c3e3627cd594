"""Command line of the RL trainer, Hydra-free: the config from a JSON file plus ``--set`` overrides.

``python -m talentrl_core.rl.cli`` runs ``train_rl`` once; under
``torchrun``/``accelerate launch`` every process runs it and accelerate shares the work (see trainer.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import os
import sys
import typing
from pathlib import Path
from typing import Optional, Sequence

from ..config import TalentRLConfig
from ..io import write_json
from .trainer import train_rl


def _build(tp, value):
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"{tp.__name__} has no fields {unknown}")
        return tp(**{k: _build(hints[k], v) for k, v in value.items()})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return value if value is None or len(args) != 1 else _build(args[0], value)
    return value


def config_from_dict(d: dict) -> TalentRLConfig:
    """A ``TalentRLConfig`` from a nested dict (the JSON form of the dataclasses; enums by value)."""
    return _build(TalentRLConfig, d)


def _set(d: dict, dotted: str, raw: str) -> None:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m talentrl_core.rl.cli", description=__doc__.split("\n")[0])
    p.add_argument("--config", help="TalentRLConfig as JSON (nested like the dataclasses); defaults otherwise")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. rl.steps=4 (JSON values)")
    p.add_argument("--init", required=True, help="initial checkpoint folder (the SFT model)")
    p.add_argument("--out", required=True, help="output folder of the final model (checkpoints go to <out>.work)")
    p.add_argument("--knowledge", default="library",
                   help="'library' (default: LanceDB at library.uri, flat when rl.flat_baseline, as the pipeline's rl stage), "
                        "a JSON talent/skill bank (StaticKnowledge; flat mode when rl.flat_baseline), or 'none' (no skills: "
                        "flat baseline only)")
    p.add_argument("--result-json", help="write the returned metadata here ('{rank}' is replaced by the process index)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    d = json.loads(Path(args.config).read_text()) if args.config else {}
    for kv in args.set:
        key, sep, val = kv.partition("=")
        if not sep:
            p.error(f"--set {kv!r}: write KEY=VALUE")
        _set(d, key, val)
    cfg = config_from_dict(d)
    if "${" in str(cfg.env.cache_dir):
        cfg.env.cache_dir = str(Path(cfg.artifacts_dir) / "cache")
    from ..envs import make_family

    family = make_family(cfg.env, cfg.env.cache_dir)
    if "${" in str(cfg.library.uri):
        cfg.library.uri = str(Path(cfg.artifacts_dir) / "library" / "lancedb")
    if args.knowledge == "library":
        from ..knowledge import open_knowledge

        knowledge = open_knowledge(cfg.library, flat=cfg.rl.flat_baseline)
    elif args.knowledge == "none":
        from ..rollout import NoKnowledge

        if not cfg.rl.flat_baseline:
            p.error("--knowledge none has no talents: pass a bank or set rl.flat_baseline=true")
        knowledge = NoKnowledge()
    else:
        from .static_knowledge import StaticKnowledge

        knowledge = StaticKnowledge.from_json(args.knowledge)
        if cfg.rl.flat_baseline:
            knowledge = knowledge.flat()
    tracker = None
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        from ..tracking import start_run

        tracker = start_run(cfg, "rl")
    done = False
    try:
        result = train_rl(cfg, family, knowledge, args.init, Path(args.out), tracker, progress=not args.no_progress)
        done = True
    finally:
        if tracker is not None:
            tracker.finish(exit_code=0 if done else 1)  # a crashed run is marked failed
    if args.result_json:
        from accelerate import PartialState

        write_json(args.result_json.replace("{rank}", str(PartialState().process_index)), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
