"""One thin asset per pipeline stage: load the config, call the library stage, return metadata.

The stage functions (``talentrl_core.stages``) do all the work and write under ``cfg.artifacts_dir``;
an asset only records what was written. Its data version is DVC's md5 of the asset's output folder
(``assets.dvc_hash``), so the version Dagster shows equals the ``md5`` in ``dvc.lock``. Its code version
is the hash of the code folders its DVC stage depends on (read from ``dvc.yaml``, the one list).

Exceptions propagate: a stage that fails fails its asset.

The rl stage is one multi-asset, ``rl``, with two assets: ``rl_checkpoint`` (TalentRL) and ``flat_grpo_checkpoint``
(the flat-GRPO baseline, same rollout budget), each with its own data version, check and lineage. Selected together
(the job, "Materialize all") one step trains both, as ``dvc repro``'s rl stage does; selected alone, only that one.

GPU placement (documented, not home-made): ``sft_checkpoint`` and the ``rl`` step carry ``GPU_OP_TAGS``.
``dagster-k8s`` (``k8s_job_executor``) reads ``dagster-k8s/config`` to request a GPU for that step's pod;
``dagster-celery`` (``celery_executor``) routes the step to the ``gpu`` queue; ``pool="gpu"`` lets
``dagster instance concurrency set gpu <n>`` cap concurrent GPU steps. The local in-process executor ignores all three.
"""


import hashlib
import json
from pathlib import Path
from typing import Any, Optional

import dagster as dg
import yaml

from talentrl_core.config import TalentRLConfig
from talentrl_core.paths import ArtifactPaths
from talentrl_core.stages import STAGES  # the registry only: the stages' own imports (torch) load when one runs
from talentrl_core.systems import RL_ASSET_OF_SYSTEM

from .dvc_hash import dvc_md5
from .progress import heartbeat
from .resources import TalentRLConfigSource

ROOT = Path(__file__).resolve().parent.parent

GPU_OP_TAGS: dict[str, Any] = {
    "dagster-k8s/config": {
        "container_config": {"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}},
        "pod_spec_config": {"node_selector": {"talentrl/accelerator": "gpu"}},
    },
    "dagster-celery/queue": "gpu",
}
GPU_TAGS = {"talentrl/accelerator": "gpu"}
CPU_TAGS = {"talentrl/accelerator": "cpu"}

ASSETS_OF_STAGE = {stage: spec.assets for stage, spec in STAGES.items()}
"Every asset a stage materialises, in the order of its DVC outs (what a selection of the stage must name)."
ASSET_OF_STAGE = {stage: assets[0] for stage, assets in ASSETS_OF_STAGE.items()}
"The asset whose data version is the stage's first DVC out (``output_of``)."
_OUTPUT_OF_ASSET = {asset: attr for spec in STAGES.values() for asset, attr in spec.outputs}


def output_of(stage: str, cfg: TalentRLConfig) -> Path:
    """The file or folder whose DVC md5 is the data version of ``stage``'s asset."""
    return output_of_asset(ASSET_OF_STAGE[stage], cfg)


def output_of_asset(asset: str, cfg: TalentRLConfig) -> Path:
    """The file or folder whose DVC md5 is ``asset``'s data version (``StageSpec.outputs``)."""
    return getattr(ArtifactPaths.of(cfg), _OUTPUT_OF_ASSET[asset])


def code_version(stage: str, dvc_yaml: Path = ROOT / "dvc.yaml") -> Optional[str]:
    """md5 over the ``talentrl_core`` deps of ``stage`` in dvc.yaml (None when dvc.yaml is absent)."""
    if not dvc_yaml.exists():
        return None
    deps = yaml.safe_load(dvc_yaml.read_text())["stages"][stage].get("deps", [])
    parts = [f"{d}:{dvc_md5(ROOT / d)}" for d in sorted(deps) if d.startswith("talentrl_core") and (ROOT / d).exists()]
    return hashlib.md5("\n".join(parts).encode()).hexdigest() if parts else None


def run_stage(stage: str, cfg: TalentRLConfig, log=None, every: float = 60.0, **kwargs) -> dict:
    """``talentrl_core.stages.STAGES[stage](cfg)``; the stage's own imports (torch) load here, not with the code location
    (UI, sensors, schedules). With ``log`` (the step's ``context.log``) a heartbeat reports the step's progress bars
    every ``every`` seconds."""
    if log is None:
        return STAGES[stage](cfg, **kwargs)
    with heartbeat(log, stage, every):
        return STAGES[stage](cfg, **kwargs)


def load_or_fail(talentrl: TalentRLConfigSource) -> TalentRLConfig:
    """The run's config; a config that does not compose fails the step with the readable error as its
    description (not only under "View full message")."""
    try:
        return talentrl.load()
    except ValueError as e:  # pipeline.config.ConfigError
        raise dg.Failure(description=f"config error: {e}", metadata={"overrides": list(talentrl.overrides)}) from e


def _materialise(stage: str, context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource) -> dg.MaterializeResult:
    cfg = load_or_fail(talentrl)
    context.log.info(f"{stage}: {talentrl.command(stage)}")
    return stage_result(stage, talentrl, cfg, run_stage(stage, cfg, context.log))


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def stage_result(stage: str, source: TalentRLConfigSource, cfg: TalentRLConfig, meta: dict,
                 asset: Optional[str] = None) -> dg.MaterializeResult:
    """MaterializeResult for a stage that returned ``meta`` (for ``asset``, default the stage's own); data version =
    DVC md5 of the asset's output."""
    out = output_of_asset(asset, cfg) if asset else output_of(stage, cfg)
    if not out.exists():
        raise FileNotFoundError(f"stage {stage} returned but wrote nothing at {out}")
    version = dvc_md5(out)
    md: dict[str, Any] = {k: _jsonable(v) for k, v in meta.items()}
    md.update(
        {
            "path": dg.MetadataValue.path(str(out)),
            "dvc_md5": version,
            "command": source.command(stage),
            "overrides": list(source.overrides),
            "experiment": cfg.experiment,
        }
    )
    if meta.get("wandb_url"):
        md["wandb_url"] = dg.MetadataValue.url(str(meta["wandb_url"]))
    return dg.MaterializeResult(asset_key=asset, metadata=md, data_version=dg.DataVersion(version))


@dg.asset(group_name="collection", kinds={"parquet"}, tags=CPU_TAGS, code_version=code_version("collect"))
def trajectories(context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource) -> dg.MaterializeResult:
    """Episodes rolled out by the collection policy (Parquet, one file per env partition)."""
    return _materialise("collect", context, talentrl)


@dg.asset(group_name="skill_library", deps=[trajectories], kinds={"lancedb"}, tags=CPU_TAGS, code_version=code_version("distill"))
def library(context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource) -> dg.MaterializeResult:
    """Skills and talents distilled from the trajectories (LanceDB tables ``skills`` and ``talents``)."""
    return _materialise("distill", context, talentrl)


@dg.asset(
    group_name="training", deps=[library], kinds={"pytorch"}, tags=GPU_TAGS, op_tags=GPU_OP_TAGS, pool="gpu", code_version=code_version("sft")
)
def sft_checkpoint(context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource) -> dg.MaterializeResult:
    """Talent-aware SFT checkpoint (routing + execution samples with their retrieved skills)."""
    return _materialise("sft", context, talentrl)


def _rl_spec(key: str, description: str) -> dg.AssetSpec:
    return dg.AssetSpec(key, deps=[sft_checkpoint], group_name="training", kinds={"pytorch"}, tags=GPU_TAGS,
                        code_version=code_version("rl"), description=description)


@dg.multi_asset(
    name="rl", can_subset=True, op_tags=GPU_OP_TAGS, pool="gpu",
    specs=[_rl_spec("rl_checkpoint", "TalentRL: contrastive routing RL + GRPO execution RL from the SFT checkpoint."),
           _rl_spec("flat_grpo_checkpoint", "The flat-GRPO baseline (flat skill retrieval, one arm) at the same budget.")],
)
def rl(context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource):
    """The rl stage: both checkpoints in one step when both are selected (as ``dvc repro``), else the selected one."""
    cfg = load_or_fail(talentrl)
    selected = {k.to_user_string() for k in context.selected_asset_keys}
    systems = tuple(s for s, a in RL_ASSET_OF_SYSTEM.items() if a in selected)
    context.log.info(f"rl ({', '.join(systems)}): {talentrl.command('rl')}")
    subset = {} if len(systems) == len(RL_ASSET_OF_SYSTEM) else {"systems": systems}  # both: as pipeline.run rl
    meta = run_stage("rl", cfg, context.log, **subset)
    for system in systems:
        yield stage_result("rl", talentrl, cfg, meta[system], asset=RL_ASSET_OF_SYSTEM[system])


@dg.asset(group_name="evaluation", deps=[sft_checkpoint, "rl_checkpoint", "flat_grpo_checkpoint"], kinds={"json"},
          tags=CPU_TAGS, code_version=code_version("evaluate"))
def evaluation(context: dg.AssetExecutionContext, talentrl: TalentRLConfigSource) -> dg.MaterializeResult:
    """Success per panel and system on the fixed panels: metrics.json, report.md, plots."""
    return _materialise("evaluate", context, talentrl)


STAGE_ASSETS = [trajectories, library, sft_checkpoint, rl, evaluation]
