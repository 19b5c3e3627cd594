"""Resources, swappable per deployment (``TALENTRL_DEPLOYMENT``: ``local`` by default, or ``cluster``).

``TalentRLConfigResource`` is the Hydra-backed ``assets.TalentRLConfigSource``: its ``overrides`` are
composed with ``conf/`` by ``pipeline.config.load_config``, exactly as ``python -m pipeline.run``
does. A deployment only changes the default overrides; a launchpad run may replace them.
"""

from __future__ import annotations

import os
import shlex

from assets.resources import TalentRLConfigSource
from talentrl_core.config import TalentRLConfig

from .config import load_config


class TalentRLConfigResource(TalentRLConfigSource):
    """Composes ``conf/`` with ``overrides`` (a ``ConfigError`` names the bad key and fails the step)."""

    def load(self) -> TalentRLConfig:
        return load_config(self.overrides)


DEMO = "experiment=demo"


def default_overrides(deployment: str) -> list[str]:
    """The overrides a run gets when the launchpad, a schedule or a sensor does not give its own."""
    return list(RESOURCES_BY_DEPLOYMENT_NAME[deployment]["talentrl"].overrides)


def _split(env_value: str | None) -> list[str]:
    return shlex.split(env_value) if env_value else []


RESOURCES_BY_DEPLOYMENT_NAME = {
    # CPU machine: the demo (what `make demo` runs: the launchpad, "Materialize all", the schedule and the sensor
    # all start from it); TALENTRL_OVERRIDES="experiment=cpu_full ..." replaces it.
    "local": {"talentrl": TalentRLConfigResource(overrides=_split(os.environ.get("TALENTRL_OVERRIDES", DEMO)))},
    # GPU cluster (dagster-k8s / dagster-celery executors): the GPU preset; artifacts on shared storage
    # via TALENTRL_ARTIFACTS_DIR, LanceDB on object storage via library.uri in the overrides.
    "cluster": {
        "talentrl": TalentRLConfigResource(
            overrides=_split(os.environ.get("TALENTRL_OVERRIDES", "experiment=gpu"))
        )
    },
}
RESOURCES_BY_DEPLOYMENT_NAME["k8s"] = RESOURCES_BY_DEPLOYMENT_NAME["cluster"]


def deployment_name() -> str:
    name = os.environ.get("TALENTRL_DEPLOYMENT", "local")
    if name not in RESOURCES_BY_DEPLOYMENT_NAME:
        raise ValueError(f"TALENTRL_DEPLOYMENT={name!r}: choose one of {sorted(RESOURCES_BY_DEPLOYMENT_NAME)}")
    return name
