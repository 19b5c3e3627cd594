"""The QA family (``QAFamily``) and one episode (``QAEnv``): Search-R1's ``<search>`` / ``<answer>`` protocol, rewards
by exact match, the oracle expert over gold supporting paragraphs (see the package docstring)."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Callable, Optional, Union

from ...benchdata import data_path
from ...config import EnvConfig
from ..base import EnvFamily, StepResult, Task
from .data import CONTEXT_SETS, ENV_NAME, EVAL_SETS, QAExample, load_context_set, load_eval_set, load_train, qa_data_dir
from .retrieval import BM25Retriever, Retriever, format_passages, paragraphs_to_passages
from .scoring import exact_match, extract_answer, f1, substring_match
from .serving import build_retriever

INVALID_QA_OBS = (
    "Invalid action: write <search>query</search> to look something up, "
    "or <answer>short answer</answer> to finish."
)
_ACTION_RE = re.compile(r"\s*<(search|answer)>(.*?)</\1>\s*", re.S)
_TAG_RE = re.compile(r"</?(search|answer|information|think)>")


# -------------------------------------------------------------------------------------------- family


def _infer_data_dir(cfg: EnvConfig) -> Optional[Path]:
    """From a composed config: the folder holding ``qa/`` above ``qa_train_file`` or ``corpus``."""
    for value in (cfg.qa_train_file, cfg.corpus):
        if "${" in value:
            continue
        for parent in Path(value).parents:
            if parent.name == "qa":
                return parent.parent
    return None


class QAFamily(EnvFamily):
    """Lists QA tasks and makes ``QAEnv`` instances sharing one (lazily built) corpus retriever."""

    name = ENV_NAME

    def __init__(
        self,
        cfg: EnvConfig,
        cache_dir: Union[str, os.PathLike],
        data_dir: Union[str, os.PathLike, None] = None,
        retriever: Optional[Retriever] = None,
    ):
        """``data_dir`` substitutes ``${data_dir}`` in uncomposed config strings; ``retriever`` overrides ``env.retriever``."""
        self.cfg = cfg
        self.cache_dir = Path(cache_dir)
        self.data_dir = data_dir if data_dir is not None else _infer_data_dir(cfg)
        self.qa_dir = qa_data_dir(self.data_dir)
        self._retriever = retriever
        self._injected = retriever is not None
        self._examples: dict[str, list[QAExample]] = {}

    # -- data
    def splits(self) -> list[str]:
        return ["train", "eval", *EVAL_SETS, *CONTEXT_SETS]

    def examples(self, split: str) -> list[QAExample]:
        """The questions of a split in file order (cached)."""
        if split not in self._examples:
            if split == "train":
                exs = load_train(data_path(self.cfg.qa_train_file, self.data_dir))
            elif split == "eval":
                exs = [ex for s in self.cfg.qa_eval_sets for ex in self.examples(s)]
            elif split in EVAL_SETS:
                exs = load_eval_set(split, self.qa_dir.parent)
            elif split in CONTEXT_SETS:
                exs = load_context_set(split, self.qa_dir.parent)
            else:
                raise KeyError(f"unknown QA split {split!r}; choose from {self.splits()}")
            self._examples[split] = exs
        return self._examples[split]

    def counts(self) -> dict[str, int]:
        """Row counts of the training file, every eval set and every context set (loads them all)."""
        return {s: len(self.examples(s)) for s in ["train", *EVAL_SETS, *CONTEXT_SETS]}

    def tasks(self, split: str, n: int = 0, seed: int = 0) -> list[Task]:
        """Tasks of ``split`` in file order; ``n > 0`` keeps a seeded subset, still in file order."""
        exs = self.examples(split)
        if 0 < n < len(exs):
            keep = sorted(random.Random(seed).sample(range(len(exs)), n))
            exs = [exs[i] for i in keep]
        # Task.split: "train" for training questions, else the set the question comes from (also under "eval").
        return [ex.to_task("train" if split == "train" else ex.set_name) for ex in exs]

    def task_types(self) -> list[str]:
        return list(self.cfg.qa_eval_sets)

    # -- envs
    def corpus_retriever(self) -> Retriever:
        """The retriever for questions without paragraphs, built on first use from ``env.retriever``."""
        if self._retriever is None:
            corpus = data_path(self.cfg.corpus, self.data_dir) if self.cfg.retriever != "http" else ""
            self._retriever = build_retriever(
                self.cfg.retriever, corpus, cache_dir=self.cache_dir, url=self.cfg.retriever_url
            )
        return self._retriever

    def __getstate__(self) -> dict:
        # Worker processes receive the family (``family.make``) by pickle: a retriever the family built
        # itself (a LanceDB table, an HTTP client) is rebuilt there on first use instead of pickled.
        state = dict(self.__dict__)
        if not self._injected:
            state["_retriever"] = None
        return state

    def make(self) -> "QAEnv":
        return QAEnv(self.cfg, self.corpus_retriever)


# ----------------------------------------------------------------------------------------------- env


class QAEnv:
    """One question at a time; see the module docstring for the protocol."""

    name = ENV_NAME

    def __init__(self, cfg: EnvConfig, corpus_retriever: Union[Retriever, Callable[[], Retriever], None] = None):
        self.cfg = cfg
        self._corpus = corpus_retriever
        self.task: Optional[Task] = None
        self._para_retriever: Optional[BM25Retriever] = None
        self.question = ""
        self.golden: list[str] = []
        self.n_steps = 0
        self.done = False
        self.queries: list[str] = []
        self.seen_titles: set[str] = set()

    @property
    def task_type(self) -> str:
        return self.task.task_type if self.task else ""

    @property
    def task_id(self) -> str:
        return self.task.task_id if self.task else ""

    def reset(self, task: Task) -> str:
        p = task.payload
        if "question" not in p or "golden_answers" not in p:
            raise ValueError(f"QA task {task.key}: payload needs 'question' and 'golden_answers'")
        self.task = task
        self.question = p["question"]
        self.golden = list(p["golden_answers"])
        paras = p.get("paragraphs")
        self._para_retriever = BM25Retriever(paragraphs_to_passages(paras)) if paras else None
        self.n_steps = 0
        self.done = False
        self.queries = []
        self.seen_titles = set()
        return self.question

    def goal(self) -> str:
        return self.question

    def _retriever(self) -> Retriever:
        if self._para_retriever is not None:
            return self._para_retriever
        if self._corpus is None:
            raise RuntimeError("this question has no paragraphs and the QAEnv was built without a corpus retriever")
        if not isinstance(self._corpus, Retriever) and callable(self._corpus):
            self._corpus = self._corpus()
        return self._corpus

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("QAEnv.step before reset")
        if self.done:
            return StepResult("The episode is over.", 0.0, True, False, {"valid": False, "kind": "after_done"})
        self.n_steps += 1
        m = _ACTION_RE.fullmatch(action or "")
        body = " ".join(m.group(2).split()) if m else ""
        if m is None or (m.group(1) == "search" and not body) or _TAG_RE.search(body):
            # Reward 0 here: the rollout loop adds env.invalid_penalty to every step with valid=False.
            return StepResult(INVALID_QA_OBS, 0.0, False, False, {"valid": False, "kind": "invalid"})
        if m.group(1) == "search":
            passages = self._retriever().search([body], self.cfg.topk)[0]
            self.queries.append(body)
            self.seen_titles.update(p.title for p in passages)
            obs = f"<information>{format_passages(passages)}</information>"
            info = {"valid": True, "kind": "search", "query": body, "doc_ids": [p.id for p in passages]}
            return StepResult(obs, 0.0, False, False, info)
        # The env only ever sees the parsed action, never the prompt: the answer scored is the model's own.
        pred = extract_answer(action) or ""
        em = exact_match(pred, self.golden)
        info = {
            "valid": True,
            "kind": "answer",
            "answer": pred,
            "em": em,
            "f1": f1(pred, self.golden),
            "subem": substring_match(pred, self.golden),
        }
        self.done = True
        return StepResult(f"Your answer: {pred}", em, True, em == 1.0, info)

    def admissible_actions(self) -> Optional[list[str]]:
        return None

    def expert_action(self) -> Optional[str]:
        """Oracle over gold supporting paragraphs; None without supporting facts or after the episode."""
        if self.task is None or self.done:
            return None
        support = self.task.payload.get("supporting_facts")
        if not support:
            return None
        # Leave the last allowed step for the answer (the rollout loop ends the episode at max_steps).
        if self.n_steps < self.cfg.max_steps - 1:
            for title in dict.fromkeys(t for t, _ in support):
                if title not in self.seen_titles:
                    query = self._expert_query(title, [i for t, i in support if t == title])
                    if query not in self.queries:
                        return f"<search>{query}</search>"
        return f"<answer>{self.golden[0]}</answer>"

    def _expert_query(self, title: str, sent_ids: list[int]) -> str:
        """The title; when that does not bring the paragraph into the top k (e.g. "Maroon 5" among
        "Maroon 5's sixth studio album", "V (Maroon 5 album)"...), the title plus the first words of its
        supporting sentence. The oracle may peek at the retriever: it is cheap over a question's paragraphs."""
        query = " ".join(title.split())
        if self._para_retriever is None:
            return query
        para = next(p for p in self.task.payload["paragraphs"] if p["title"] == title)
        sents = [para["sentences"][i] for i in sent_ids if 0 <= i < len(para["sentences"])] or para["sentences"][:1]
        words = " ".join(sents).split()
        for q in (query, " ".join([query, *words[:12]]), " ".join([query, *words[:40]])):
            if title in (p.title for p in self._para_retriever.search([q], self.cfg.topk)[0]):
                return q
        return query

    def close(self) -> None:
        self._para_retriever = None
