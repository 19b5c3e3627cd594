"""Hydra command-line support for ``pipeline.run``: sweep expansion (for validation before launch), the per-run
artifacts folder of a multirun job, and loading a DVC ``params.yaml`` as the config.

A multirun job (``python -m pipeline.run sft -m sft.lr=1e-3,3e-3``) writes its stage's outputs in its own folder,
``<artifacts_dir>/multirun/<time>/<job number>``; the stage's inputs (the other stages' outputs and the game cache)
are linked there from ``<artifacts_dir>``, so a sweep of one stage reuses what earlier stages built.
"""

from __future__ import annotations

import itertools
import os
import shlex
from pathlib import Path
from typing import Sequence

import yaml

MAX_VALIDATED = 256  # sweep combinations composed before launch (a larger sweep is validated by Hydra per job)


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """Every combination a basic-sweeper multirun would launch (``a=1,2 b=x,y`` -> 4 lists of overrides)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    choices = []
    for o in parsed:
        if o.is_sweep_override():
            key = o.get_key_element()
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    return [list(c) for c in itertools.islice(itertools.product(*choices), MAX_VALIDATED)]


def stage_outputs(stage: str) -> list[str]:
    """The stage's outputs relative to the artifacts folder (from dvc.yaml, the one list of them)."""
    from .dvc_sync import stage_paths

    return [o.split("/", 1)[1] for o in stage_paths(stage)[1] if o.startswith("artifacts/")]


def link_inputs(stage: str, base: Path, run_dir: Path) -> list[str]:
    """Link everything of ``base`` a multirun job of ``stage`` reads (all but the stage's own outputs) into
    ``run_dir``; returns the linked paths (relative)."""
    outs = set(stage_outputs(stage))
    run_dir.mkdir(parents=True, exist_ok=True)
    linked = []
    for top in sorted(base.iterdir()) if base.is_dir() else []:
        if top.name in {"multirun", "hydra", "wandb"} or top.name in outs:
            continue
        children = [top] if not any(o.startswith(top.name + "/") for o in outs) else sorted(top.iterdir())
        for src in children:
            rel = src.relative_to(base).as_posix()
            dst = run_dir / rel
            if rel in outs or dst.exists() or dst.is_symlink():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(src.resolve(), dst, target_is_directory=src.is_dir())
            linked.append(rel)
    return linked


def job_config(cfg, run_dir: Path | None = None):
    """(the main artifacts folder, the job's ``TalentRLConfig``) of a composed Hydra config. For a multirun job
    (``run_dir`` given) ``artifacts_dir`` is replaced in the composed config before it is resolved, so every value
    interpolated from it (``library.uri``, ``env.cache_dir``, an experiment's own paths) follows the job's folder;
    values given explicitly stay. Replacing the field of the resolved config instead left ``library.uri`` on the
    main library, so a sweep of ``distill`` wrote its versions there."""
    import copy

    from omegaconf import open_dict, read_write

    from .config import to_config

    main_dir = Path(str(cfg.artifacts_dir))
    if run_dir is not None:
        cfg = copy.deepcopy(cfg)
        with read_write(cfg), open_dict(cfg):
            cfg.artifacts_dir = str(run_dir)
    return main_dir, to_config(cfg)


def read_params(path: Path) -> tuple[dict, list[str]]:
    """(config values, overrides) of a params.yaml written by ``pipeline.params`` (and maybe edited by
    ``dvc exp run -S``). A missing or unreadable file raises ``ConfigError`` naming it."""
    from .config import ConfigError

    if not path.is_file():
        raise ConfigError(f"{path}: no such params file (write it with `python -m pipeline.params <overrides>`)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(data).__name__}")
    overrides = shlex.split(str(data.pop("overrides", "") or ""))
    return data, overrides
