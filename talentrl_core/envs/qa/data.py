"""QA data, all normalised to ``QAExample`` (``../shared/data/qa``, formats in its MANIFEST.md); see the package
docstring (``envs/qa/__init__.py``) for the sets and splits."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from ...benchdata import data_dir as benchdata_dir
from ...io import iter_jsonl
from ..base import Task

ENV_NAME = "qa"

EVAL_SETS: dict[str, tuple[str, int]] = {
    "nq": ("eval/nq_1000.jsonl", 1000),
    "triviaqa": ("eval/triviaqa_1000.jsonl", 1000),
    "popqa": ("eval/popqa_1000.jsonl", 1000),
    "hotpotqa": ("eval/hotpotqa_500.jsonl", 500),
    "2wiki": ("eval/2wiki_500.jsonl", 500),
    "musique": ("eval/musique_500.jsonl", 500),
    "bamboogle": ("eval/bamboogle.jsonl", 125),
}
"Short name -> (path under data/qa, expected rows). A file with another row count is refused."

CONTEXT_SETS: dict[str, tuple[str, int, str]] = {
    "hotpotqa_distractor": ("context/hotpotqa_dev_distractor_100.jsonl", 100, "hotpotqa"),
    "hotpotqa_hipporag": ("context/hipporag_hotpotqa_train.json", 100, "hotpotqa"),
    "hotpotqa_knowagent": ("context/knowagent_hotpot_train.json", 500, "hotpotqa"),
    "musique_hipporag": ("context/hipporag_musique_train.json", 100, "musique"),
}
"Sets whose questions carry their own paragraphs: name -> (path, expected rows, source benchmark)."


class QADataError(ValueError):
    """A QA data file is missing or malformed; the message names the file and line (or element)."""


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    golden_answers: tuple[str, ...]
    set_name: str
    "The set it was read from: an eval short name, a context set name, or the train file's stem."
    source: str
    "Source benchmark (the task type): nq, hotpotqa, 2wiki, ..."
    paragraphs: Optional[tuple[dict, ...]] = None
    "The question's own context: {'title': str, 'sentences': [str]} per paragraph."
    supporting_facts: Optional[tuple[tuple[str, int], ...]] = None
    "Gold (title, sentence index) pairs, in hop order where the data gives one."

    def payload(self) -> dict:
        d: dict[str, Any] = {"question": self.question, "golden_answers": list(self.golden_answers), "set": self.set_name}
        if self.paragraphs is not None:
            d["paragraphs"] = [dict(p) for p in self.paragraphs]
        if self.supporting_facts is not None:
            d["supporting_facts"] = [list(sf) for sf in self.supporting_facts]
        return d

    def to_task(self, split: str) -> Task:
        return Task(ENV_NAME, split, self.source, f"{self.set_name}/{self.id}", self.payload())


# ------------------------------------------------------------------------------------------- loading


def qa_data_dir(data_dir: Union[str, os.PathLike, None] = None) -> Path:
    """The ``qa`` folder of the data dir (``benchdata.data_dir``: argument, else $TALENTRL_DATA_DIR, else
    ../shared/data)."""
    return benchdata_dir(data_dir) / "qa"


def _data_root(path: Path) -> Optional[Path]:
    """The data folder above ``path`` (the parent of its ``qa/`` folder), for naming the dataset."""
    return next((p.parent for p in Path(path).parents if p.name == "qa"), None)


def iter_records(path: Union[str, os.PathLike]) -> Iterator[tuple[str, Any]]:
    """(where, row) for each JSONL line (where = "file:line") or JSON array element ("file: element i")."""
    path = Path(path)
    if not path.is_file():
        from ...benchdata import missing

        raise QADataError(str(missing(path, _data_root(path))))
    if path.suffix == ".jsonl":
        for lineno, row in iter_jsonl(path, QADataError):
            yield f"{path}:{lineno}", row
    else:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise QADataError(f"{path}: not valid JSON ({e})") from e
        if not isinstance(data, list):
            raise QADataError(f"{path}: expected a JSON array of questions, got {type(data).__name__}")
        for i, row in enumerate(data):
            yield f"{path}: element {i}", row


def _golden(row: dict, where: str) -> tuple[str, ...]:
    if "golden_answers" in row:
        ans = row["golden_answers"]
    elif "answer" in row:
        ans = row["answer"]
    else:
        raise QADataError(f"{where}: no 'golden_answers' or 'answer' field (keys: {sorted(row)})")
    ans = [ans] if isinstance(ans, str) else ans
    aliases = row.get("answer_aliases") or []
    if not isinstance(ans, list) or not isinstance(aliases, list):
        raise QADataError(f"{where}: answers must be a string or a list of strings")
    out: list[str] = []
    for a in [*ans, *aliases]:
        if not isinstance(a, str):
            raise QADataError(f"{where}: answer {a!r} is not a string")
        if a.strip() and a not in out:
            out.append(a)
    if not out:
        raise QADataError(f"{where}: no non-empty golden answer")
    return tuple(out)


def _paragraphs(row: dict, where: str) -> tuple[Optional[tuple[dict, ...]], Optional[tuple[tuple[str, int], ...]]]:
    """Paragraphs and supporting facts of HotpotQA (list or HF dict layout) and MuSiQue rows."""
    paras: list[dict] = []
    support: list[tuple[str, int]] = []
    if "context" in row:
        ctx = row["context"]
        try:
            if isinstance(ctx, dict):  # HF layout: {"title": [...], "sentences": [[...], ...]}
                pairs = list(zip(ctx["title"], ctx["sentences"], strict=True))
            else:  # original HotpotQA layout: [[title, [sentences]], ...]
                pairs = [(c[0], c[1]) for c in ctx]
            paras = [{"title": str(t), "sentences": [str(s) for s in sents]} for t, sents in pairs]
            sf = row.get("supporting_facts") or []
            if isinstance(sf, dict):
                support = [(str(t), int(i)) for t, i in zip(sf["title"], sf["sent_id"], strict=True)]
            else:
                support = [(str(t), int(i)) for t, i in sf]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise QADataError(f"{where}: malformed HotpotQA context/supporting_facts ({type(e).__name__}: {e})") from e
    elif "paragraphs" in row:  # MuSiQue
        try:
            by_idx = {}
            for p in row["paragraphs"]:
                paras.append({"title": str(p["title"]), "sentences": [str(p["paragraph_text"])]})
                by_idx[p["idx"]] = p
            hops = [q["paragraph_support_idx"] for q in row.get("question_decomposition") or []]
            order = [i for i in hops if i is not None] or [p["idx"] for p in row["paragraphs"] if p.get("is_supporting")]
            support = [(str(by_idx[i]["title"]), 0) for i in order]
        except (KeyError, TypeError) as e:
            raise QADataError(f"{where}: malformed MuSiQue paragraphs ({type(e).__name__}: {e})") from e
    else:
        return None, None
    if not paras:
        raise QADataError(f"{where}: empty context")
    titles = {p["title"] for p in paras}
    for t, _ in support:
        if t not in titles:
            raise QADataError(f"{where}: supporting fact title {t!r} is not among the paragraphs")
    return tuple(paras), (tuple(support) if support else None)


def normalize_row(row: Any, where: str, set_name: str, source: Optional[str] = None) -> QAExample:
    """One raw row (any of the layouts above) as a ``QAExample``; ``source=None`` infers it (train rows)."""
    if not isinstance(row, dict):
        raise QADataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    rid = next((row[k] for k in ("id", "_id", "idx") if k in row), None)
    if rid is None or (isinstance(rid, str) and not rid.strip()):
        raise QADataError(f"{where}: no 'id', '_id' or 'idx' field")
    q = row.get("question")
    if not isinstance(q, str) or not q.strip():
        raise QADataError(f"{where}: 'question' must be a non-empty string")
    q = " ".join(q.split())
    paras, support = _paragraphs(row, where)
    return QAExample(
        id=str(rid),
        question=q,
        golden_answers=_golden(row, where),
        set_name=set_name,
        source=source if source is not None else infer_train_source(q),
        paragraphs=paras,
        supporting_facts=support,
    )


def load_qa_file(
    path: Union[str, os.PathLike], set_name: str, source: Optional[str] = None, expected_rows: Optional[int] = None
) -> list[QAExample]:
    """All rows of one file; duplicate ids and a row count other than ``expected_rows`` are errors."""
    out: list[QAExample] = []
    seen: dict[str, str] = {}
    for where, row in iter_records(path):
        ex = normalize_row(row, where, set_name, source)
        if ex.id in seen:
            raise QADataError(f"{where}: duplicate id {ex.id!r} (first at {seen[ex.id]})")
        seen[ex.id] = where
        out.append(ex)
    if expected_rows is not None and len(out) != expected_rows:
        raise QADataError(f"{path}: {len(out)} rows, expected {expected_rows} (truncated or wrong file?)")
    return out


def load_eval_set(name: str, data_dir: Union[str, os.PathLike, None] = None) -> list[QAExample]:
    """An eval set by short name (nq, triviaqa, popqa, hotpotqa, 2wiki, musique, bamboogle)."""
    if name not in EVAL_SETS:
        raise KeyError(f"unknown QA eval set {name!r}; choose from {sorted(EVAL_SETS)}")
    rel, n = EVAL_SETS[name]
    return load_qa_file(qa_data_dir(data_dir) / rel, name, source=name, expected_rows=n)


def load_context_set(name: str, data_dir: Union[str, os.PathLike, None] = None) -> list[QAExample]:
    """A set whose questions carry paragraphs and supporting facts (see ``CONTEXT_SETS``)."""
    if name not in CONTEXT_SETS:
        raise KeyError(f"unknown QA context set {name!r}; choose from {sorted(CONTEXT_SETS)}")
    rel, n, source = CONTEXT_SETS[name]
    return load_qa_file(qa_data_dir(data_dir) / rel, name, source=source, expected_rows=n)


def load_train(path: Union[str, os.PathLike]) -> list[QAExample]:
    """Training questions (R1-Searcher stage files); the set name is the file's stem."""
    path = Path(path)
    return load_qa_file(path, path.stem, source=None)


# 2WikiMultiHopQA questions are generated from templates (comparison, inference, compositional,
# bridge-comparison); HotpotQA's are written freely. On the eval files these patterns flag ~99% of
# 2wiki_500 and ~3% of hotpotqa_500 (those are HotpotQA comparison questions that read like 2Wiki's).
_REL = (
    r"father|mother|husband|wife|spouse|son|daughter|child|uncle|aunt|sibling|brother|sister|stepfather|"
    r"stepmother|stepson|stepdaughter|grandfather|grandmother|grandson|granddaughter|composer|director|"
    r"performer|founder|producer|creator"
)
_2WIKI_PATTERNS = [
    re.compile(p) if "(?i:" in p else re.compile(p, re.I)
    for p in (
        r"\b(paternal|maternal) grand(father|mother)\b",
        r"\bdirector of (the )?film\b",
        r"\b(of|for) (the )?film [A-Z]",
        r"^which film\b",
        r"\b(born|died) (first|later|earlier)\b",
        r"\blived longer\b|\bis older than the other\b|^who is (older|younger)\b",
        r"\breleased more recently\b|\bcame out (first|earlier|later)\b",
        r"\b(originate from|share|have|of) the same nationality\b|\boriginate from the same country\b",
        r"\bhave the directors?\b|\blocated in the same country\b|\bare .* from the same country\b",
        r"(?i:^(who|what|where|when|why|which)\b).*'s (?i:" + _REL + r"|[a-z]+-in-law)\b",
        r"(?i:^(who|what|where|when|why|which|are|did)\b).*\b(?i:the )?(?i:" + _REL + r"|[a-z]+-in-law) of (song |film )?[A-Z]",
        r"\b(performer|composer) of song\b|\bthe company that (manufactured|published|produced|made)\b",
        r"\b(place|date) of (birth|death|burial)\b",
    )
]


def infer_train_source(question: str) -> str:
    """'2wiki' when the question matches a 2WikiMultiHopQA template, else 'hotpotqa'.

    >>> infer_train_source("Who is Rose Schlossberg's father?")
    '2wiki'
    >>> infer_train_source("Which film came out first, Indradhanura Chhai or The Death Of Black King?")
    '2wiki'
    >>> infer_train_source("What party campaigned for the Irish Home Rule Movement?")
    'hotpotqa'
    """
    q = question.strip()
    return "2wiki" if any(p.search(q) for p in _2WIKI_PATTERNS) else "hotpotqa"
