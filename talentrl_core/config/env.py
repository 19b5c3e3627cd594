"""The ``env`` section: which environment family runs and with what settings (``EnvConfig``), the family names
(``EnvName``) and each family's own defaults (``FAMILY_SETTINGS``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .checks import AT_LEAST_1, NON_NEGATIVE, POSITIVE, check_ranges


class EnvName(StrEnum):
    alfworld = "alfworld"
    textworld = "textworld"
    qa = "qa"
    webshop = "webshop"


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
    routing_cue: str = ""
    ("\"Recognise, then route\" (issue 38, A2): a regular expression whose first group is a cue in what the router sees "
     "(e.g. 'the coin lies (\\w+)'); the router then restates it before its talent, <cue>east</cue><talent>T1</talent>, "
     "in SFT, RL and evaluation alike. Empty: the router names its talent only.")
    routing_cue_values: list[str] = field(default_factory=list)
    "The cues the router may restate (constrained decoding's choices; env.routing_cue needs them)."
    memory: bool = False
    ("Add the family's memory line to execution prompts (ALFWorld: what the agent holds, where it saw the goal's "
     "objects, the receptacles searched and not yet searched), computed from the agent's own past only: a declared "
     "deviation from the raw-observation protocol (docs/alfworld.md). A family without one refuses it (envs.make_family).")
    memory_goal: bool = False
    ("With env.memory, set the task's own words beside what the page shows (WebShop: beside each option group the value "
     "the instruction names for it, beside the price the instruction's bound). A further declared deviation: the "
     "line does the instruction lookup for the policy; which value to click, and whether to buy, stay its choice "
     "(docs/webshop.md). A family without such a line refuses it (envs.make_family).")
    memory_values: str = "text"
    ("How env.memory_goal's line spells the task's values: text (WebShop: 'size: none (task: small)') or command "
     "('(task: [small])', as the click command spells it: a byte-level tokenizer splits ' navy' and '[navy' into "
     "different tokens, so only in brackets is naming the value a copy of the line's tokens; docs/webshop.md).")
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
        check_ranges("env", self, history=NON_NEGATIVE, routing_obs_chars=NON_NEGATIVE, obs_chars=(">= 20 (characters of an observation shown)", lambda v: v >= 20),
                     step_timeout_s=POSITIVE, webshop_n_test=AT_LEAST_1, webshop_n_dev=NON_NEGATIVE,
                     workers=NON_NEGATIVE)
        if self.invalid_penalty > 0:
            raise ValueError("env.invalid_penalty is added to the reward: make it <= 0")
        self._check_routing_cue()
        if self.memory_goal and not self.memory:
            raise ValueError("env.memory_goal=true adds to the memory line: set env.memory=true too")
        if self.memory_values not in ("text", "command"):
            raise ValueError(f"env.memory_values={self.memory_values!r}: choose text or command")
        if self.memory_values == "command" and not self.memory_goal:
            raise ValueError("env.memory_values=command spells the values of env.memory_goal's line: set "
                             "env.memory_goal=true (and env.memory=true) too")

        if self.expert not in ("handcoded", "walkthrough", "planner"):
            raise ValueError(f"env.expert={self.expert!r}: choose handcoded, walkthrough or planner")
        for key, allowed in (("webshop_index", ("memory", "mmap")), ("webshop_search", ("free", "choice")), ("retriever", ("bm25", "dense", "http"))):
            if getattr(self, key) not in allowed:
                raise ValueError(f"env.{key}={getattr(self, key)!r}: choose {', '.join(allowed[:-1])} or {allowed[-1]}")

    @property
    def memory_mode(self) -> str:
        """The execution prompt's memory line: "" (none), "page" (``memory``), "goal" (``memory`` + ``memory_goal``) or
        "goal_command" (and ``memory_values=command``)."""
        if not self.memory:
            return ""
        if not self.memory_goal:
            return "page"
        return "goal_command" if self.memory_values == "command" else "goal"

    @classmethod
    def of_family(cls, name: str, **overrides) -> "EnvConfig":
        """The settings of family ``name`` (``FAMILY_SETTINGS`` over the defaults), then ``overrides``."""
        return cls(name=EnvName(name), **{**FAMILY_SETTINGS[str(name)], **overrides})

    def _check_routing_cue(self) -> None:
        if not self.routing_cue:
            if self.routing_cue_values:
                raise ValueError(f"env.routing_cue_values={list(self.routing_cue_values)} needs env.routing_cue (the "
                                 "pattern that reads the cue)")
            return
        try:
            groups = re.compile(self.routing_cue).groups
        except re.error as e:
            raise ValueError(f"env.routing_cue={self.routing_cue!r} is not a regular expression: {e}") from None
        if groups < 1:
            raise ValueError(f"env.routing_cue={self.routing_cue!r} needs a group: its first group is the cue")
        values = [str(v) for v in self.routing_cue_values]
        if len(values) < 2 or len(set(values)) != len(values) or any(not v or set(v) & set("<>") for v in values):
            raise ValueError(f"env.routing_cue_values={values}: give at least two distinct, non-empty cues without < or >")
        if self.routing_obs_chars <= 0:
            raise ValueError(f"env.routing_cue={self.routing_cue!r} reads the first observation: set env.routing_obs_chars > 0")
