"""The single stage entry point: ``python -m pipeline.run <stage> [hydra overrides and flags...]``.

Users, the Dagster assets (through ``talentrl_core.stages``) and DVC all run a stage this way:

    python -m pipeline.run collect experiment=demo collect.n_episodes=8
    python -m pipeline.run sft experiment=demo -m sft.lr=1e-3,3e-3   # Hydra multirun: one artifacts folder per job
    python -m pipeline.run sft experiment=demo --cfg job               # print the composed config, run nothing
    python -m pipeline.run sft --params params.yaml                    # the config DVC tracks (`dvc exp run -S` edits it)

After the stage name the command line is Hydra's (``--cfg``, ``--info``, ``-m``, ``hydra.*`` overrides, launcher and
sweeper plugins). Every override is composed and validated before anything runs: a bad key or value exits 2 with
``config error: ...`` naming the key and the choices (every combination of a sweep is checked first). A multirun
job writes to ``<artifacts_dir>/multirun/<time>/<n>`` with the stage's inputs linked from ``<artifacts_dir>``.

Stdout carries only the stage's JSON metadata (one document per job; logs go to stderr). Exit codes: 0 done;
1 a named failure (``<stage>: error: ...``; ``TALENTRL_TRACEBACK=1`` shows the traceback); 2 the config or the command
line is wrong; 3 the stage is not built yet. Offline by default: HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE and
WANDB_MODE=offline are set unless the environment already sets them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from .env import offline_defaults

STAGE_DOC = {
    "collect": "roll out a policy on training tasks -> artifacts/trajectories",
    "distill": "trajectories -> skills and talents (LanceDB) -> artifacts/library",
    "sft": "talent-aware SFT -> artifacts/models/sft",
    "rl": "routing + execution RL from the SFT checkpoint -> artifacts/models/rl",
    "evaluate": "fixed panels, baselines, report -> artifacts/eval",
}
# Hydra flags that take a value (the value is not an override)
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
               "--experimental-rerun"}


def usage() -> str:
    from talentrl_core.stages import BUILT, STAGES

    rows = [f"  {s:<9} {'built' if s in BUILT else 'not built yet':<14} {STAGE_DOC.get(s, '')}" for s in STAGES]
    return (
        "usage: python -m pipeline.run <stage> [overrides...] [Hydra flags: -m, --cfg job, --info, ...]\n"
        "       python -m pipeline.run <stage> --params params.yaml [--cfg job]\n\n"
        "Run one TalentRL pipeline stage with Hydra overrides of conf/.\n\nstages:\n" + "\n".join(rows) +
        "\n\nexamples:\n  python -m pipeline.run collect experiment=demo collect.n_episodes=8\n"
        "  python -m pipeline.run sft experiment=demo -m sft.lr=1e-3,3e-3\n"
        "  python -m pipeline.run sft experiment=demo --help    # Hydra's help: config groups and overrides\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    offline_defaults()
    argv = list(sys.argv[1:] if argv is None else argv)
    from talentrl_core.stages import STAGES

    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    stage, rest = argv[0], argv[1:]
    if stage not in STAGES:
        print(f"unknown stage '{stage}'; stages: {', '.join(STAGES)}\n\n{usage()}", file=sys.stderr)
        return 2
    if "--params" in rest:
        return _from_params(stage, rest)
    return _with_hydra(stage, rest)


def _overrides_of(args: Sequence[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in VALUE_FLAGS:
            skip = True
        elif not a.startswith("-") and "=" in a:
            out.append(a)
    return out


def _check(combos: Sequence[Sequence[str]]) -> str | None:
    """The first config error over all combinations (None: all compose and validate)."""
    from .config import ConfigError, load_config

    for c in combos:
        try:
            load_config([o for o in c if not o.lstrip("+~").startswith(("hydra.", "hydra/"))])
        except ConfigError as e:
            return str(e) + (f"  (sweep combination: {' '.join(c)})" if len(combos) > 1 else "")
    return None


def _with_hydra(stage: str, rest: list[str]) -> int:
    import hydra

    from . import sweep
    from .config import CONF_DIR, refuse

    multirun = "-m" in rest or "--multirun" in rest
    overrides = _overrides_of(rest)
    try:
        combos = sweep.expand(overrides) if multirun else [overrides]
    except Exception as e:  # Hydra's override grammar
        return refuse(e)
    if not ({"--help", "-h", "--hydra-help"} & set(rest)):
        err = _check(combos)
        if err:
            return refuse(err)
    codes: list[int] = []

    @hydra.main(config_path=str(CONF_DIR), config_name="config")
    def task(cfg) -> None:
        codes.append(_hydra_job(stage, cfg, multirun))

    saved = sys.argv
    sys.argv = [f"pipeline.run {stage}", f"hydra.job.name={stage}", *rest]
    try:
        task()
    finally:
        sys.argv = saved
    return max(codes, default=0)


def _hydra_job(stage: str, cfg, multirun: bool) -> int:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from . import sweep
    from .config import refuse

    try:
        obj = OmegaConf.to_object(cfg)
    except ValueError as e:
        return refuse(e)
    if multirun:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        linked = sweep.link_inputs(stage, Path(obj.artifacts_dir), run_dir)
        print(f"{stage}: job {HydraConfig.get().job.num} writes to {run_dir} (inputs linked: {', '.join(linked) or 'none'})",
              file=sys.stderr)
        obj = dataclasses.replace(obj, artifacts_dir=str(run_dir))
    return run_stage(stage, obj, indent=None if multirun else 2)


def _from_params(stage: str, rest: list[str]) -> int:
    """Run (or with ``--cfg job`` print) the config a params.yaml holds: DVC's stage commands, so that
    ``dvc exp run -S key=value`` changes what runs. Values that differ from what conf/ plus the file's recorded
    overrides compose are listed on stderr."""
    import yaml

    from . import sweep
    from .config import ConfigError, config_from_values, differences, load_config, refuse, to_plain

    i = rest.index("--params")
    extra = rest[:i] + rest[i + 2:]
    if i + 1 >= len(rest) or extra not in ([], ["--cfg", "job"]):
        print("usage: python -m pipeline.run <stage> --params FILE [--cfg job] (no overrides: edit FILE, e.g. "
              "`dvc exp run -S key=value`, or rewrite it with `python -m pipeline.params <overrides>`)", file=sys.stderr)
        return 2
    path = Path(rest[i + 1])
    try:
        values, overrides = sweep.read_params(path)
        cfg = config_from_values(values, str(path))
        composed = load_config(overrides)
    except ConfigError as e:
        return refuse(e)
    edits = differences(composed, cfg)
    if edits:
        shown = ", ".join(f"{k}={v[1]!r} (conf/ gives {v[0]!r})" for k, v in list(edits.items())[:12])
        print(f"{stage}: {path} sets {shown}", file=sys.stderr)
    if extra:
        print(yaml.safe_dump(to_plain(cfg), sort_keys=False), end="")
        return 0
    return run_stage(stage, cfg)


def run_stage(stage: str, cfg, indent: int | None = 2) -> int:
    """Run one stage on a validated config; prints its JSON metadata on stdout and returns the exit code."""
    from talentrl_core.stages import STAGES, CollectFailed, StageNotBuilt

    try:
        with stdout_to_stderr():
            meta = STAGES[stage](cfg)
    except StageNotBuilt:
        print(f"stage {stage} is not built yet", file=sys.stderr)
        return 3
    except (CollectFailed, FileNotFoundError, OSError, ValueError) as e:  # named failures: one clear line, exit 1
        if os.environ.get("TALENTRL_TRACEBACK"):
            raise
        print(f"{stage}: error: {e}\n(set TALENTRL_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun / accelerate launch only the main process prints
        print(json.dumps(meta, indent=indent, sort_keys=True, default=str), flush=True)
    return 0


@contextlib.contextmanager
def stdout_to_stderr():
    """While a stage runs, everything written to stdout (libraries' prints, worker processes) goes to stderr, so
    stdout carries the stage's JSON alone (``python -m pipeline.run ... | jq``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    sys.exit(main())
