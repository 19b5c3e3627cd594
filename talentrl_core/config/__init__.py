"""Typed configuration for every stage of the TalentRL pipeline.

One dataclass per stage, each field with a default and a one-line doc (the string literal under it). Hydra composes ``conf/``
against these schemas (registered from ``pipeline/``); the library only ever receives these plain dataclasses, never OmegaConf
objects. Cross-field checks live in ``__post_init__`` and raise ``ValueError`` saying what to change.

The sections live in one module each: ``env`` (``EnvConfig``), ``model`` (``ModelConfig``), ``library`` (``CollectConfig``,
``LibraryConfig``), ``training`` (``SFTConfig``, ``RLConfig``), ``evaluation`` (``EvalConfig``, ``TrackerConfig``), with
the range rules in ``checks``; ``TalentRLConfig`` composes them here, and every section and its enums are importable
from ``talentrl_core.config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import NON_NEGATIVE, check_ranges
from .env import FAMILY_SETTINGS, EnvConfig, EnvName
from .evaluation import EvalConfig, TrackerConfig, TrackerMode
from .library import CollectConfig, Distiller, LibraryConfig, PolicyKind
from .model import ATTN_CHOICES, Backend, Decoding, ModelConfig, ModelKind
from .training import ArmChoice, ExecGroup, RLConfig, RoutingLabels, RoutingTarget, SFTConfig, TokenAgg


@dataclass
class TalentRLConfig:
    experiment: str = "default"
    "Name of the experiment preset (for logs and run ids)."
    data_dir: str = "../shared/data"
    "Benchmark data folder (read only)."
    artifacts_dir: str = "artifacts"
    "Everything a run writes goes under here."
    keep_previous_runs: int = 1
    "SFT/RL output folders holding a run with other settings are moved to ``<folder>.prev-<time>``, never silently deleted; this many such copies are kept (0: delete them, saying so)."
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    library: LibraryConfig = field(default_factory=LibraryConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)

    def __post_init__(self) -> None:
        check_ranges("", self, keep_previous_runs=NON_NEGATIVE)
        if self.sft.routing_target == RoutingTarget.cue_only and not self.env.routing_cue:
            raise ValueError("sft.routing_target=cue_only supervises the restated cue: set env.routing_cue and "
                             "env.routing_cue_values (or sft.routing_target=choice)")


__all__ = [
    "ATTN_CHOICES", "ArmChoice", "FAMILY_SETTINGS", "Backend", "CollectConfig", "Decoding", "Distiller", "EnvConfig", "EnvName",
    "EvalConfig", "ExecGroup", "LibraryConfig", "ModelConfig", "ModelKind", "PolicyKind", "RLConfig", "RoutingLabels", "RoutingTarget",
    "SFTConfig",     "TalentRLConfig", "TokenAgg", "TrackerConfig", "TrackerMode", "check_ranges",
]
