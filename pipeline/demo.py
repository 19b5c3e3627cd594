"""``make demo``: materialise the whole chain through Dagster with ``experiment=demo``, then record it in DVC.

1. params.yaml ← the composed config for the overrides (``pipeline.params``);
2. Dagster materialises, in process and into the instance at DAGSTER_HOME (``.dagster_home``, so
   ``make ui`` shows the runs), every asset of every stage (``talentrl_core.stages.STAGES``), with the blocking
   checks between them;
3. ``dvc commit -f`` records what was materialised into dvc.lock (``pipeline.dvc_sync``); ``dvc status``
   then reports the pipeline up to date and ``dvc repro`` does nothing;
4. prints the report path. A stage paused at its sitting's budget (``sft.max_minutes``, ``rl.max_minutes``) is said
   in one line and exits 75; the same command resumes it (what materialised is recorded in dvc.lock either way).

Extra arguments are more Hydra overrides: ``python -m pipeline.demo collect.n_episodes=8``.
"""

from __future__ import annotations

import sys
import time
from typing import Sequence

from talentrl_core.checkpoints import PAUSED_EXIT, Paused

from .env import dagster_home, offline_defaults

DEMO_OVERRIDES = ["experiment=demo"]


def main(argv: Sequence[str] | None = None) -> int:
    offline_defaults()
    dagster_home()
    import dagster as dg

    from assets.stage_assets import ASSETS_OF_STAGE
    from talentrl_core.paths import ArtifactPaths

    from .config import load_config
    from .definitions import defs, talentrl_chain
    from .dvc_sync import dvc, record
    from .params import write_params

    overrides = DEMO_OVERRIDES + list(sys.argv[1:] if argv is None else argv)
    cfg = load_config(overrides)  # a bad override stops here with the key named
    write_params(overrides)
    stages = list(ASSETS_OF_STAGE)
    print(f"materialising {', '.join(a for s in stages for a in ASSETS_OF_STAGE[s])} with overrides {overrides}")
    t0 = time.time()
    result = defs.resolve_job_def(talentrl_chain.name).execute_in_process(
        run_config={"resources": {"talentrl": {"config": {"overrides": overrides}}}},
        instance=dg.DagsterInstance.get(),
        asset_selection=[dg.AssetKey(a) for s in stages for a in ASSETS_OF_STAGE[s]],
        raise_on_error=False,
        tags={"talentrl/trigger": "make-demo"},
    )
    print(f"dagster run {result.run_id}: {'success' if result.success else 'FAILED'} in {time.time() - t0:.0f}s")
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    materialised = [s for s in stages if set(ASSETS_OF_STAGE[s]) <= done]
    recorded = record(materialised, overrides)  # what did materialise is recorded even after a failure
    print(f"recorded in dvc.lock: {', '.join(recorded) or 'nothing'}")
    print("dvc status:", dvc("status", check=False).stdout.strip())
    report = ArtifactPaths.of(cfg).eval / "report.md"
    failed_checks = [e.asset_check_evaluation_data.check_name for e in result.all_events
                     if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.asset_check_evaluation_data.passed]
    if not result.success and "evaluate" in materialised:
        # every stage ran and the report exists; a blocking gate refused promotion (e.g. RL below SFT)
        print(f"report: {report}")
        print(f"promotion gate failed: {', '.join(failed_checks) or 'see the Dagster run'} — the report says why")
        return 0
    paused = paused_stage(result.all_events)
    if paused:  # a stage stopped at its sitting's budget (sft/rl.max_minutes), checkpointed: not a failure
        print(f"{paused}; run the same command again to resume")
        return PAUSED_EXIT
    if not result.success:
        return 1
    print(f"report: {report}")
    return 0


def paused_stage(events) -> str | None:
    """The message of a step that failed because its stage paused at its time budget (``checkpoints.Paused``, which
    Dagster wraps in its own step error), or None."""
    for e in events:
        err = e.step_failure_data.error if e.is_step_failure else None
        while err is not None:
            if err.cls_name == Paused.__name__:
                return err.message.strip().split(": ", 1)[-1]
            err = err.cause
    return None


if __name__ == "__main__":
    sys.exit(main())
