"""The single stage entry point: ``python -m pipeline.run <stage> [hydra overrides and flags...]``.

Users, the Dagster assets (through ``talentrl_core.stages``) and DVC all run a stage this way:

    python -m pipeline.run collect experiment=demo collect.n_episodes=8
    python -m pipeline.run sft experiment=demo -m sft.lr=1e-3,3e-3   # Hydra multirun: one artifacts folder per job
    python -m pipeline.run sft experiment=demo --cfg job               # print the composed config, run nothing
    python -m pipeline.run sft --params params.yaml                    # the config DVC tracks (`dvc exp run -S` edits it)

After the stage name the command line is Hydra's (``--cfg``, ``--info``, ``-m``, ``hydra.*`` overrides, launcher and
sweeper plugins). Every override is composed and validated before anything runs: a bad key or value exits 2 with
``config error: ...`` naming the key and the choices (every combination of a sweep is checked first). A multirun
job writes to ``<artifacts_dir>/multirun/<time>/<n>`` with the stage's inputs linked from ``<artifacts_dir>``; every
path derived from ``artifacts_dir`` (``library.uri``, ``env.cache_dir``) follows the job's folder.

Stdout carries only the stage's JSON metadata (one document per job; logs go to stderr). Exit codes: 0 done;
1 a named failure: any exception of the stage or of Hydra's setup (an artifacts folder that is a file or read-only is
checked before Hydra makes its run folder in it) ends in one line ``<stage>: error: [Type: ]...``
(``TALENTRL_TRACEBACK=1`` shows the traceback); 2 the config or the command line is wrong; 75 paused at the
sitting's time budget (``sft.max_minutes``, ``rl.max_minutes``), checkpointed: the same command resumes. Offline by default:
HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE and WANDB_MODE=offline are set unless the environment already sets them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from .env import offline_defaults
from .errors import named_errors, report

INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc"}
"Hydra flags that print something and run no job (no run folder is made for them)."
# Hydra flags that take a value (the value is not an override)
VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
               "--experimental-rerun"}


def usage() -> str:
    from talentrl_core.stages import STAGES

    rows = [f"  {s:<9} {spec.doc}" for s, spec in STAGES.items()]
    return (
        "usage: python -m pipeline.run <stage> [overrides...] [Hydra flags: -m, --cfg job, --info, ...]\n"
        "       python -m pipeline.run <stage> --params params.yaml [--cfg job]\n\n"
        "Run one TalentRL pipeline stage with Hydra overrides of conf/.\n\nstages:\n" + "\n".join(rows) +
        "\n\nexamples:\n  python -m pipeline.run collect experiment=demo collect.n_episodes=8\n"
        "  python -m pipeline.run sft experiment=demo -m sft.lr=1e-3,3e-3\n"
        "  python -m pipeline.run sft experiment=demo --help    # Hydra's help: config groups and overrides\n"
    )


@named_errors("pipeline.run")
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
    from .config import CONF_DIR, open_mappings, refuse

    multirun = "-m" in rest or "--multirun" in rest
    rest = open_mappings(rest)  # eval.n_by_panel={a: 1} -> ++eval.n_by_panel={a: 1}: a dict field takes new keys
    overrides = _overrides_of(rest)
    try:
        combos = sweep.expand(overrides) if multirun else [overrides]
    except Exception as e:  # Hydra's override grammar
        return refuse(e)
    if not ({"--help", "-h", "--hydra-help"} & set(rest)):
        err = _check(combos)
        if err:
            return refuse(err)
    if not (INFO_FLAGS & set(rest)):
        try:
            _prepare_output_dir(stage, combos[0] if combos else [], multirun)
        except Exception as e:  # a config error (an unknown hydra/launcher) exits 2, anything else 1
            return report(stage, e)
    codes: list[int] = []

    @hydra.main(config_path=str(CONF_DIR), config_name="config")
    def task(cfg) -> None:
        try:
            codes.append(_hydra_job(stage, cfg, multirun))
        except Exception as e:  # one named line, not Hydra's traceback
            codes.append(report(stage, e))

    saved, saved_full = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = [f"pipeline.run {stage}", f"hydra.job.name={stage}", *rest]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's own failures reach named_errors, not Hydra's traceback printer
    try:
        task()
    finally:
        sys.argv = saved
        if saved_full is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_full
    failed = [c for c in codes if c in (1, 2)]  # a failed job is not hidden behind another's pause (75)
    return max(failed or codes, default=0)


def _prepare_output_dir(stage: str, overrides: Sequence[str], multirun: bool) -> None:
    """Create the parent of Hydra's run folder (``hydra.run.dir``; with ``-m`` ``hydra.sweep.dir``; both under
    ``artifacts_dir`` by default) before Hydra starts, so that an artifacts folder that is a file, a broken link or
    read-only fails here with an ``OSError`` naming it, not inside Hydra."""
    from .config import hydra_output_dir

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    out = hydra_output_dir(stage, overrides, multirun)
    problem = unwritable(out.parent)
    if problem:
        raise OSError(f"{problem}: cannot create the run folder {out} ({key}, under artifacts_dir); point "
                      "artifacts_dir (or TALENTRL_ARTIFACTS_DIR) at a writable folder")


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written to (None: it can, and now exists)."""
    for p in [folder, *folder.parents]:
        if p.is_symlink() and not p.exists():
            return f"{p} is a broken link (to {os.readlink(p)})"
        if p.exists() and not p.is_dir():
            return f"{p} is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{e.filename or folder}: {e.strerror or e}"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


def _hydra_job(stage: str, cfg, multirun: bool) -> int:
    from hydra.core.hydra_config import HydraConfig

    from . import sweep
    from .config import refuse

    run_dir = Path(HydraConfig.get().runtime.output_dir) if multirun else None
    try:  # a multirun job: every path derived from artifacts_dir (library.uri, env.cache_dir) follows its folder
        main_dir, obj = sweep.job_config(cfg, run_dir)
    except ValueError as e:
        return refuse(e)
    if run_dir is not None:
        linked = sweep.link_inputs(stage, main_dir, run_dir)
        print(f"{stage}: job {HydraConfig.get().job.num} writes to {run_dir} (inputs linked: "
              f"{', '.join(linked) or 'none'})", file=sys.stderr)
    return run_stage(stage, obj, indent=None if multirun else 2)


def _from_params(stage: str, rest: list[str]) -> int:
    """Run (or with ``--cfg job`` print) the config a params.yaml holds: DVC's stage commands, so that
    ``dvc exp run -S key=value`` changes what runs. Values that differ from what conf/ plus the file's recorded
    overrides compose are listed on stderr."""
    import yaml

    from . import sweep
    from .config import ConfigError, config_from_values, differences, load_config, refuse, to_plain
    from .params import restore_hint

    i = rest.index("--params")
    extra = rest[:i] + rest[i + 2:]
    if i + 1 >= len(rest) or extra not in ([], ["--cfg", "job"]):
        print("usage: python -m pipeline.run <stage> --params FILE [--cfg job] (no overrides: edit FILE, e.g. "
              "`dvc exp run -S key=value`, or rewrite it with `python -m pipeline.params <overrides>`)", file=sys.stderr)
        return 2
    path = Path(rest[i + 1])
    try:
        values, overrides = sweep.read_params(path)
    except ConfigError as e:
        return refuse(e)
    try:
        cfg = config_from_values(values, str(path))
        composed = load_config(overrides)
    except ConfigError as e:  # the value stays in the file: say so, and how to restore it
        return refuse(f"{e}; {restore_hint(path, overrides)}")
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
    from talentrl_core.stages import STAGES

    try:
        with stdout_to_stderr():
            meta = STAGES[stage](cfg)
    except Exception as e:  # any failure: one named line, exit 1 (TALENTRL_TRACEBACK=1 re-raises)
        return report(stage, e)
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
