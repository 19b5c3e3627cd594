"""Record a Dagster materialisation into dvc.lock, so ``dvc status`` is clean and ``dvc repro`` a no-op.

Dagster and DVC run the same stage code on the same paths (DVC through ``python -m pipeline.run <stage>
--params params.yaml``), but only DVC writes dvc.lock. After Dagster has materialised some assets:

1. params.yaml is rewritten for the overrides the run used (``pipeline.params``), so the lock's
   command and params are the ones that produced the outputs;
2. ``dvc commit -f <stage>...`` hashes deps, params and outs of those stages into dvc.lock (and
   copies the outs into the DVC cache, ready for ``dvc push`` to the local remote ``dvc_remote/``).

The md5 DVC records for each out equals the data version Dagster stored (both are DVC's hash;
``assets.dvc_hash``). Usage:

    python -m pipeline.dvc_sync --from-dagster     # overrides and stages from the Dagster instance
    python -m pipeline.dvc_sync collect distill -o experiment=demo
    dvc status                                     # -> Data and pipelines are up to date.

The other way round, after ``dvc repro``: ``python -m pipeline.dvc_sync --to-dagster`` reports the
outputs to the Dagster instance as materialisations whose data version is the dvc.lock md5.

The committed dvc.lock is written by ``python -m pipeline.dvc_sync --lock`` (``refresh_lock``): for every stage, its
command, the md5 of each code dep as the files are now and the params.yaml values it tracks; outputs (and the
artifact deps, which are upstream outputs) are listed without a hash, because they come from a run (``make demo``
or ``dvc repro`` records them on the machine that has them, in its DVC cache). A fresh clone's ``dvc status`` then
names only missing outputs, and ``dvc plots show`` / ``dvc exp run`` never look for a cached folder listing that no
cache or remote of the clone holds (tests/test_dvc_fresh.py).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

import yaml

from .env import ROOT

from talentrl_core.stages import STAGES

STAGE_ORDER = list(STAGES)
"dvc.yaml's stages in chain order (``talentrl_core.stages.STAGES``)."


def dvc(*args: str, root: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess:
    """Run the venv's DVC in ``root`` (PATH gets the venv first, so stage commands find its python)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"dvc {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def stage_paths(stage: str, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(deps, outs) of a dvc.yaml stage."""
    spec = yaml.safe_load((root / "dvc.yaml").read_text())["stages"][stage]
    outs = [o if isinstance(o, str) else next(iter(o)) for o in spec.get("outs", [])]
    return list(spec.get("deps", [])), outs


def committable(stage: str, root: Path = ROOT) -> bool:
    deps, outs = stage_paths(stage, root)
    return all((root / p).exists() for p in deps + outs)


def record(stages: Sequence[str], overrides: Optional[Sequence[str]] = None, root: Path = ROOT) -> list[str]:
    """Write params.yaml for ``overrides`` (unless None) and ``dvc commit -f`` the committable ``stages``."""
    from .params import render, write_params

    if overrides is not None:
        params = root / "params.yaml"
        if not params.exists() or params.read_text() != render(overrides):
            write_params(overrides, params)
    ready = [s for s in STAGE_ORDER if s in stages and committable(s, root)]
    if ready:
        dvc("commit", "-f", "-q", *ready, root=root)
    return ready


def refresh_lock(root: Path = ROOT) -> list[str]:
    """Rewrite dvc.lock for the code and params.yaml as they are: deps on code hashed by DVC, params read from
    params.yaml, outputs and artifact deps without a hash (they come from a run). Returns the stages written."""
    import logging

    from dvc.repo import Repo
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta

    logging.getLogger("dvc").setLevel(logging.WARNING)  # not "Updating lock file" once per stage
    lock = root / "dvc.lock"
    lock.unlink(missing_ok=True)  # nothing of an earlier lock is kept: every entry is recomputed
    with Repo(str(root)) as repo:
        stages = {s.name: s for s in repo.index.stages if getattr(s, "cmd", None)}
        outs = {str(o.def_path) for s in stages.values() for o in s.outs}
        done = []
        for name in [s for s in STAGE_ORDER if s in stages] + sorted(set(stages) - set(STAGE_ORDER)):
            stage = stages[name]
            for dep in stage.deps:
                if str(dep.def_path) in outs:
                    dep.hash_info, dep.meta = HashInfo(), Meta()
                else:
                    dep.save()
            for out in stage.outs:
                out.hash_info, out.meta = HashInfo(), Meta()
            stage.dump(update_pipeline=False)
            done.append(name)
    return done


def from_dagster(instance=None) -> tuple[list[str], list[str]]:
    """(stages, overrides) of the latest Dagster materialisations that still match the workspace.

    A stage counts when its asset's stored data version equals the current DVC md5 of its output
    (the files on disk are still the ones Dagster produced). All of them must share one override list.
    """
    import dagster as dg

    from assets.dvc_hash import dvc_md5
    from assets.stage_assets import ASSET_OF_STAGE, output_of

    from .config import load_config
    from .env import dagster_home

    if instance is None:
        dagster_home()
        instance = dg.DagsterInstance.get()
    stages, overrides = [], None
    for stage in STAGE_ORDER:
        event = instance.get_latest_materialization_event(dg.AssetKey(ASSET_OF_STAGE[stage]))
        if event is None or event.asset_materialization is None:
            continue
        md = event.asset_materialization.metadata
        if "overrides" not in md or "dvc_md5" not in md:
            continue
        ov = list(md["overrides"].value)
        out = output_of(stage, load_config(ov))
        if not out.exists() or dvc_md5(out) != md["dvc_md5"].value:
            continue
        if overrides is not None and ov != overrides:
            raise ValueError(f"{stage} was materialised with overrides {ov}, earlier stages with {overrides}")
        overrides = ov
        stages.append(stage)
    return stages, overrides or []


def to_dagster(instance=None, root: Path = ROOT) -> list[str]:
    """Report the outputs ``dvc repro`` produced to Dagster, with their dvc.lock md5 as data version.

    Only outs whose files still hash to the lock's md5 are reported (runless materialisation events:
    the Dagster UI then shows the same data versions DVC recorded, and no stale assets).
    """
    import dagster as dg

    from assets.dvc_hash import dvc_md5
    from assets.stage_assets import ASSETS_OF_STAGE

    from .env import dagster_home

    if instance is None:
        dagster_home()
        instance = dg.DagsterInstance.get()
    lock_file = root / "dvc.lock"
    lock = yaml.safe_load(lock_file.read_text())["stages"] if lock_file.exists() else {}
    reported = []
    for stage in STAGE_ORDER:
        entry = lock.get(stage)
        if not entry or not entry.get("outs"):
            continue
        for asset, out in zip(ASSETS_OF_STAGE[stage], entry["outs"]):  # rl: rl_checkpoint, flat_grpo_checkpoint
            path = root / out["path"]
            if not path.exists() or dvc_md5(path) != out.get("md5"):
                continue
            instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset_key=asset,
                    metadata={
                        "dvc_md5": out["md5"],
                        "command": entry["cmd"],
                        "overrides": shlex.split(str(entry.get("params", {}).get("params.yaml", {}).get("overrides", ""))),
                        "path": dg.MetadataValue.path(str(path)),
                        "recorded_by": "dvc repro (pipeline.dvc_sync --to-dagster)",
                    },
                    tags={"dagster/data_version": out["md5"], "dagster/data_version_is_user_provided": "true"},
                )
            )
            if stage not in reported:
                reported.append(stage)
    return reported


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.dvc_sync", description=__doc__.splitlines()[0])
    p.add_argument("stages", nargs="*", help=f"stages to record (default: all of {STAGE_ORDER} with outputs)")
    p.add_argument("-o", "--override", action="append", default=None, help="a Hydra override (repeatable)")
    p.add_argument("--from-dagster", action="store_true", help="take stages and overrides from the Dagster instance")
    p.add_argument("--to-dagster", action="store_true", help="report what dvc.lock records to Dagster instead")
    p.add_argument("--lock", action="store_true",
                   help="rewrite dvc.lock for the committed code and params.yaml (outputs without a hash)")
    args = p.parse_args(argv)
    if args.lock:
        print(f"dvc.lock: code and params of {', '.join(refresh_lock())} (outputs come from a run)")
        return 0
    if args.to_dagster:
        print(f"reported to Dagster: {', '.join(to_dagster()) or 'nothing'}")
        return 0
    if args.from_dagster:
        stages, overrides = from_dagster()
    else:
        stages, overrides = args.stages or STAGE_ORDER, args.override
    done = record(stages, overrides)
    print(f"recorded in dvc.lock: {', '.join(done) or 'nothing'}")
    print(dvc("status", check=False).stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
