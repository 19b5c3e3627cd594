"""The Dagster code location: assets, checks, resources per deployment, job, schedule, sensor.

    dagster dev -w workspace.yaml            # or: make ui
    dagster asset materialize --select '*' -m pipeline.definitions

Deployment (``TALENTRL_DEPLOYMENT``): ``local`` (default; in-process executor, ``experiment=demo``) or
``cluster``/``k8s`` (``experiment=gpu`` overrides; steps as Kubernetes jobs through dagster-k8s, or
Celery workers through dagster-celery — install one; ``sft_checkpoint`` and the ``rl`` step (assets
``rl_checkpoint`` and ``flat_grpo_checkpoint``) carry the GPU tags those executors read, see ``assets.stage_assets``).

Every run, schedule tick and sensor request carries the deployment's overrides (``TALENTRL_OVERRIDES`` replaces
them) and a ``talentrl/experiment`` tag. Launchpad run config maps onto Hydra overrides, the same strings
``python -m pipeline.run`` takes::

    resources:
      talentrl:
        config:
          overrides: [experiment=demo, collect.n_episodes=8]

Environment: ``TALENTRL_RETRAIN_CRON`` (default ``0 3 * * 0``, Sundays 03:00) and
``TALENTRL_RETRAIN_TZ`` (default UTC) for the retraining schedule; ``TALENTRL_WATCH_DIR`` (default
``artifacts/incoming``) for the sensor that starts the chain when new ``*.parquet`` trajectory files
land. Schedule and sensor start stopped; switch them on in the UI or with ``dagster schedule start``.
"""


import hashlib
import json
import os
from pathlib import Path

import dagster as dg

from assets import STAGE_ASSETS, STAGE_CHECKS

from .env import ROOT, offline_defaults
from .resources import RESOURCES_BY_DEPLOYMENT_NAME, default_overrides, deployment_name

offline_defaults()
DEPLOYMENT = deployment_name()
RUN_OVERRIDES = default_overrides(DEPLOYMENT)  # the experiment the launchpad, schedule and sensor run
RUN_CONFIG = {"resources": {"talentrl": {"config": {"overrides": RUN_OVERRIDES}}}}


def experiment_of(overrides: list[str]) -> str:
    """The ``experiment=`` choice among overrides ('default' without one).

    >>> experiment_of(["experiment=demo", "sft.lr=1e-3"])
    'demo'
    """
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "default")


RUN_TAGS = {"talentrl/experiment": experiment_of(RUN_OVERRIDES), "talentrl/overrides": " ".join(RUN_OVERRIDES)[:200]}

DEFAULT_RETRAIN_CRON = "0 3 * * 0"
DEFAULT_WATCH_DIR = "artifacts/incoming"

talentrl_chain = dg.define_asset_job(
    "talentrl_chain",
    selection=dg.AssetSelection.assets(*STAGE_ASSETS),
    description="collect → distill → sft → rl (TalentRL + flat GRPO) → evaluate, with the blocking checks between them "
                f"(default: {' '.join(RUN_OVERRIDES) or 'conf/ defaults'}).",
    config=RUN_CONFIG,  # the launchpad opens on the demo's overrides
    tags=RUN_TAGS,
)

retrain_schedule = dg.ScheduleDefinition(
    name="retrain_weekly",
    job=talentrl_chain,
    cron_schedule=os.environ.get("TALENTRL_RETRAIN_CRON", DEFAULT_RETRAIN_CRON),
    execution_timezone=os.environ.get("TALENTRL_RETRAIN_TZ", "UTC"),
    default_status=dg.DefaultScheduleStatus.STOPPED,
    run_config=RUN_CONFIG,
    tags={"talentrl/trigger": "schedule", **RUN_TAGS},
    description=f"Retrain the chain with {' '.join(RUN_OVERRIDES) or 'the conf/ defaults'} (TALENTRL_OVERRIDES).",
)


def watch_dir() -> Path:
    p = Path(os.environ.get("TALENTRL_WATCH_DIR", DEFAULT_WATCH_DIR))
    return p if p.is_absolute() else ROOT / p


def parquet_listing(folder: Path) -> list[list]:
    """Sorted ``[relative name, mtime_ns]`` of every ``*.parquet`` below ``folder`` (the sensor cursor)."""
    if not folder.is_dir():
        return []
    return sorted([p.relative_to(folder).as_posix(), p.stat().st_mtime_ns] for p in folder.rglob("*.parquet"))


@dg.sensor(job=talentrl_chain, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.STOPPED)
def incoming_trajectories(context: dg.SensorEvaluationContext):
    """Run the chain (the deployment's experiment, ``RUN_OVERRIDES``) when new or rewritten ``*.parquet`` files
    appear in ``TALENTRL_WATCH_DIR``."""
    folder = watch_dir()
    listing = parquet_listing(folder)
    seen = {tuple(x) for x in json.loads(context.cursor)} if context.cursor else set()
    new = [x for x in listing if tuple(x) not in seen]
    if not new:
        return dg.SkipReason(f"no new *.parquet in {folder}")
    context.update_cursor(json.dumps(listing))
    key = hashlib.md5(json.dumps(new).encode()).hexdigest()
    names = ",".join(n for n, _ in new)
    return dg.RunRequest(run_key=key, run_config=RUN_CONFIG,
                         tags={"talentrl/trigger": "incoming", "talentrl/new_files": names[:200], **RUN_TAGS})


def executor_for(name: str) -> dg.ExecutorDefinition:
    """local: one process (2-core CPU boxes; torch imports once). cluster: dagster-k8s or dagster-celery."""
    if name == "local":
        return dg.in_process_executor
    try:
        from dagster_k8s import k8s_job_executor  # type: ignore[import-not-found]

        return k8s_job_executor
    except ImportError:
        pass
    try:
        from dagster_celery import celery_executor  # type: ignore[import-not-found]

        return celery_executor
    except ImportError as e:
        raise ImportError(
            f"TALENTRL_DEPLOYMENT={name} runs steps through dagster-k8s or dagster-celery: "
            "pip install dagster-k8s==<dagster version> (or dagster-celery)"
        ) from e


defs = dg.Definitions(
    assets=STAGE_ASSETS,
    asset_checks=STAGE_CHECKS,
    jobs=[talentrl_chain],
    schedules=[retrain_schedule],
    sensors=[incoming_trajectories],
    resources=RESOURCES_BY_DEPLOYMENT_NAME[DEPLOYMENT],
    executor=executor_for(DEPLOYMENT),
)
