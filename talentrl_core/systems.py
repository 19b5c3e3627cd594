"""The evaluation systems, in one registry: every list of system names (the config's allowed choices and default,
the report's order and comparisons, the rl stage's outputs and assets, the seed replicates' pooled pairs) derives
from ``SYSTEMS``. A *system* is a checkpoint plus a way of routing and of retrieving. Importing this module is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass


NO_CHECKPOINT = "none"
"The checkpoint kind of a zero-parameter floor (``FLOORS``): nothing is loaded."
CHECKPOINTS = {"base": "base_model", "sft": "sft_checkpoint", "rl": "rl_checkpoint", "flat_grpo": "flat_grpo_checkpoint"}
"Checkpoint kind → its ``ArtifactPaths`` attribute (for the trained ones also the Dagster asset's name)."
RL_CHECKPOINTS = ("rl", "flat_grpo")
"What the rl stage trains, in order: TalentRL, then the flat-GRPO baseline (``RLConfig.as_flat_baseline``)."


@dataclass(frozen=True)
class SystemSpec:
    checkpoint: str
    "A kind of ``CHECKPOINTS``."
    routing: str
    "The rollout's routing mode: none, policy, oracle or random."
    use_skills: bool
    "Whether retrieval runs."
    flat: bool
    "Whether it reads the flat library (no talent term, λ = 0)."
    doc: str = ""
    policy: str = "model"
    ("Who acts: ``model`` (the checkpoint), ``random`` (a uniformly random admissible command) or "
     "``strategy:<name>`` (a registered strategy expert or rule baseline of the panel's family, ``envs.strategies``).")


SYSTEMS: dict[str, SystemSpec] = {
    "zero_shot": SystemSpec("base", "none", False, True, "base model (before SFT), no talent, no skills"),
    "flat_skillbank": SystemSpec("sft", "none", True, True, "talent-SFT checkpoint, no talent, flat retrieval: the "
                                 "SkillBank baseline (``sft.flat_share`` of the SFT trajectories were rendered this way)"),
    "random_talent": SystemSpec("sft", "random", True, False, "talent-SFT checkpoint, a seeded random talent per task"),
    "oracle_talent": SystemSpec("sft", "oracle", True, False, "talent-SFT checkpoint, the task's oracle talent (its "
                                "distillation label)"),
    "talent_sft": SystemSpec("sft", "policy", True, False, "talent-SFT checkpoint, the policy routes"),
    "flat_grpo": SystemSpec("flat_grpo", "none", True, True, "flat-skill GRPO checkpoint, flat retrieval"),
    "talentrl": SystemSpec("rl", "policy", True, False, "TalentRL checkpoint (routing + execution RL), the policy routes"),
}
"Every system, in table and plot order."

STRATEGY_PREFIX = "strategy:"
FLOORS: dict[str, SystemSpec] = {
    "random_action": SystemSpec(NO_CHECKPOINT, "none", False, True, "a uniformly random admissible command at every "
                                "step: the zero-parameter floor", policy="random"),
}
"Zero-parameter floors, evaluated on the same tasks beside the trained systems; besides these, ``strategy:<name>``."

RL_SYSTEMS = tuple(name for kind in RL_CHECKPOINTS for name, s in SYSTEMS.items() if s.checkpoint == kind)
"The systems whose checkpoint the rl stage trains, in training order (talentrl, flat_grpo)."
RL_ASSET_OF_SYSTEM = {name: CHECKPOINTS[SYSTEMS[name].checkpoint] for name in RL_SYSTEMS}
"The Dagster asset of each rl-trained system (rl_checkpoint, flat_grpo_checkpoint)."
DEFAULT_SYSTEMS = [name for name, s in SYSTEMS.items() if s.checkpoint not in RL_CHECKPOINTS]
"``eval.systems``' default: every system that needs no RL checkpoint."

PAIRED_COMPARISONS = [("talent_sft", "zero_shot"), ("talent_sft", "flat_skillbank"), ("oracle_talent", "random_talent"),
                      ("talentrl", "talent_sft"), ("talentrl", "flat_grpo"), ("flat_grpo", "talent_sft")]
"(A, B) pairs the report tests on the same tasks: each claim of the method against its baseline."
HEADLINE_PAIRS = [("talentrl", "flat_grpo"), ("talentrl", "talent_sft"), ("talent_sft", "flat_skillbank"),
                  ("oracle_talent", "random_talent")]
"The main comparisons, in order: a report's headline shows, per panel, the first two whose systems both ran."
HELD_TO_FLOORS = ("talentrl", "talent_sft")
"The trained systems the report also tests against every zero-parameter floor evaluated beside them (a rule, the teacher)."
PROMOTION_PAIR = ("talentrl", "talent_sft")
"The promotion gate and the routing comparison: the RL system against the SFT it started from."


def system_spec(name: str) -> SystemSpec:
    """The spec of a trained system, a floor, or ``strategy:<name>`` (a strategy expert or rule baseline acting
    alone: the teacher's imitation ceiling, a rule floor); a KeyError for anything else."""
    if name in SYSTEMS:
        return SYSTEMS[name]
    if name in FLOORS:
        return FLOORS[name]
    if name.startswith(STRATEGY_PREFIX) and len(name) > len(STRATEGY_PREFIX):
        return SystemSpec(NO_CHECKPOINT, "none", False, True, f"the strategy {name[len(STRATEGY_PREFIX):]!r} acting "
                          "alone (no parameters)", policy=name)
    raise KeyError(name)


def is_floor(name: str) -> bool:
    """Whether ``name`` is a zero-parameter floor (``FLOORS`` or ``strategy:<name>``).

    >>> is_floor("random_action"), is_floor("strategy:rule_options"), is_floor("zero_shot")
    (True, True, False)
    """
    return name in FLOORS or (name.startswith(STRATEGY_PREFIX) and len(name) > len(STRATEGY_PREFIX))


def check_systems(names) -> None:
    """ValueError naming the unknown systems and the choices."""
    bad = [s for s in names if s not in SYSTEMS and not is_floor(s)]
    if bad:
        raise ValueError(f"eval.systems has unknown {bad}; choose from {sorted(SYSTEMS) + sorted(FLOORS)} or "
                         f"{STRATEGY_PREFIX}<name> (a strategy expert or rule baseline of the panel's family)")
