"""Search-augmented QA environment (DESIGN.md §2; Search-R1's multi-turn protocol).

An episode is one question. The agent acts with ``<search>query</search>`` — the env answers with
``<information>Doc 1(Title: …) …</information>`` — or ``<answer>text</answer>``, which ends the episode
with reward = exact match (1/0) against the golden answers; F1 and substring match go into ``info``.
Anything else is an invalid action (``info['valid']`` False, reward 0: the rollout loop adds
``env.invalid_penalty`` to invalid steps).

Where searches go: a question that carries its own paragraphs (HotpotQA distractor setting, MuSiQue)
is answered from those paragraphs alone (BM25 over its 2–20 paragraphs); any other question goes to the
corpus retriever chosen by ``env.retriever`` (bm25 / dense over ``env.corpus``, or a Search-R1 /retrieve
server). The expert is an oracle over gold supporting paragraphs: it searches the title of each
supporting paragraph not yet seen, then answers with the first golden answer; a task without
supporting facts has no expert (``expert_action()`` is None).

Data (``../shared/data/qa``, formats in its MANIFEST.md), all normalised to ``QAExample``:

* eval sets by short name: nq, triviaqa, popqa (FlashRAG rows: id, question, golden_answers) and
  hotpotqa, 2wiki, musique, bamboogle (R1-Searcher rows: idx, question, answer);
* training questions (``env.qa_train_file``, R1-Searcher stage 1/2, HotpotQA + 2Wiki train mixed and
  untagged): the task type is inferred per question by ``infer_train_source`` (2Wiki's templated
  questions vs HotpotQA's free-form ones), so training and evaluation share task types;
* context sets that carry paragraphs and supporting facts: hotpotqa_distractor (dev, distractor
  setting), hotpotqa_hipporag, hotpotqa_knowagent (train), musique_hipporag (train).

Splits for ``QAFamily.tasks``: "train", "eval" (all of ``env.qa_eval_sets``), any eval set name, any
context set name. ``Task.split`` is the set, ``Task.task_type`` its source benchmark, ``Task.key`` is
"<set>/<id>".
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    **dict.fromkeys(("ENV_NAME", "EVAL_SETS", "CONTEXT_SETS", "QADataError", "QAExample", "qa_data_dir",
                     "iter_records", "normalize_row", "load_qa_file", "load_eval_set", "load_context_set", "load_train",
                     "infer_train_source"), "data"),
    **dict.fromkeys(("QAFamily", "QAEnv", "INVALID_QA_OBS"), "env"),
}
"""Names of the old ``envs/qa.py`` module (tests/test_data.py imports them from here), loaded on first use:
importing the package (as the registry does for ``spec``) imports none of its modules."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
