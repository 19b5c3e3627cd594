"""Answer scoring for search-augmented QA (DESIGN.md §2: exact match on the final ``<answer>``, F1 logged).

``normalize_answer`` is the SQuAD v1.1 normalisation that Search-R1 (``verl/utils/reward_score/qa_em.py``)
and FlashRAG also use: lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse
whitespace. ``exact_match`` is Search-R1's ``em_check`` (1 when the normalised prediction equals any
normalised golden answer); ``f1`` is SQuAD's token F1, maximised over golden answers, with HotpotQA's
rule that a yes/no/noanswer prediction only scores when it equals the golden answer.

Two departures from Search-R1, both deliberate:
  * the reward is computed on the *completion only*. Search-R1's ``extract_solution`` searched the
    whole decoded sequence, prompt included, and so had to skip the prompt's example ``<answer>``
    ("return None if there is at most one match"); a completion with one genuine answer was then
    unscored. Here ``extract_answer`` sees only what the model wrote and takes its LAST ``<answer>``.
  * an empty prediction never matches, even against a golden answer that normalises to "" (e.g.
    "The"): an empty answer must not earn reward.

All functions are pure; the batch scorers are list-in/list-out and chosen by name from ``SCORERS``.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Callable, Optional, Sequence, Union

Golden = Union[str, Sequence[str]]

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.S)
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lower, remove punctuation, remove articles, collapse whitespace.

    >>> normalize_answer("The  Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("  An apple, a day ")
    'apple day'
    >>> normalize_answer("U.S. Route 22")
    'us route 22'
    >>> normalize_answer("theatre")   # articles only as whole words
    'theatre'
    >>> normalize_answer("")
    ''
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES_RE.sub(" ", s)
    return " ".join(s.split())


def _as_list(golden_answers: Golden) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    return [g for g in golden_answers if isinstance(g, str)]


def _normalized(prediction: Optional[str]) -> str:
    """The normalised prediction; "" for none or one that normalises away (which never scores)."""
    return normalize_answer(prediction) if prediction is not None else ""


def exact_match(prediction: Optional[str], golden_answers: Golden) -> float:
    """1.0 when the normalised prediction equals any normalised golden answer, else 0.0.

    ``golden_answers`` may be one string or a list of aliases.

    >>> exact_match("the Beatles", "Beatles")
    1.0
    >>> exact_match("BEATLES.", ["The Rolling Stones", "The Beatles"])
    1.0
    >>> exact_match("Paul  McCartney", ["paul mccartney"])
    1.0
    >>> exact_match("Beatles band", ["Beatles"])   # no partial credit
    0.0
    >>> exact_match("", ["The"])                   # empty never matches, even a golden "" after normalising
    0.0
    >>> exact_match(None, ["x"])
    0.0
    >>> exact_match("x", [])
    0.0
    """
    pred = _normalized(prediction)
    return 1.0 if pred and any(pred == normalize_answer(g) for g in _as_list(golden_answers)) else 0.0


def _f1_one(pred: str, gold: str) -> float:
    if pred in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer"):
        # HotpotQA's official rule: yes/no answers are all-or-nothing.
        return 1.0 if pred == gold else 0.0
    p, g = pred.split(), gold.split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: Optional[str], golden_answers: Golden) -> float:
    """Token-level F1 of the normalised strings, the maximum over golden answers.

    >>> f1("the Eiffel Tower", "Eiffel Tower")
    1.0
    >>> round(f1("Eiffel Tower in Paris", ["Eiffel Tower"]), 4)   # P = 2/4, R = 2/2
    0.6667
    >>> round(f1("Paris", ["London", "Paris, France"]), 4)        # best alias: P = 1, R = 1/2
    0.6667
    >>> f1("yes", "no"), f1("no", ["No."])
    (0.0, 1.0)
    >>> f1("", "Paris"), f1(None, "Paris")
    (0.0, 0.0)
    """
    pred = _normalized(prediction)
    return max((_f1_one(pred, normalize_answer(g)) for g in _as_list(golden_answers)), default=0.0) if pred else 0.0


def substring_match(prediction: Optional[str], golden_answers: Golden) -> float:
    """1.0 when a normalised golden answer occurs inside the normalised prediction (Search-R1's ``subem_check``).

    >>> substring_match("It was Mark Twain.", ["Mark Twain", "Samuel Clemens"])
    1.0
    >>> substring_match("Twain", "Mark Twain")
    0.0
    """
    pred = _normalized(prediction)
    return 1.0 if pred and any(g and g in pred for g in map(normalize_answer, _as_list(golden_answers))) else 0.0


def extract_answer(completion: str) -> Optional[str]:
    """The text of the LAST ``<answer>…</answer>`` in the model's completion, stripped; None when there is none.

    Pass only what the model generated, never the prompt: the prompt may hold an example answer.

    >>> extract_answer("<think>hmm</think><answer> Paris </answer>")
    'Paris'
    >>> extract_answer("<answer>Lyon</answer> wait, no. <answer>Paris</answer>")
    'Paris'
    >>> extract_answer("<search>capital of France</search>") is None
    True
    >>> extract_answer("The answer is Paris.") is None   # an untagged answer earns nothing
    True
    >>> extract_answer("<answer></answer>")
    ''
    """
    found = _ANSWER_RE.findall(completion)
    return found[-1].strip() if found else None


def answer_score(completion: str, golden_answers: Golden, metric: str = "em") -> float:
    """Score a completion: extract its last answer, then apply ``metric`` (em, f1 or subem); no answer → 0.

    >>> answer_score("<think>..</think><answer>The Beatles</answer>", ["Beatles"])
    1.0
    >>> answer_score("I think it is the Beatles", ["Beatles"])
    0.0
    """
    return METRICS[metric](extract_answer(completion), golden_answers)


METRICS: dict[str, Callable[[Optional[str], Golden], float]] = {
    "em": exact_match,
    "f1": f1,
    "subem": substring_match,
}


def em_reward(completions: Sequence[str], golden_answers: Sequence[Golden]) -> list[float]:
    """Batch exact-match reward, one per completion (completion text only).

    >>> em_reward(["<answer>Paris</answer>", "Paris", "<answer>Lyon</answer>"], [["Paris"]] * 3)
    [1.0, 0.0, 0.0]
    """
    _check_lengths(completions, golden_answers)
    return [answer_score(c, g, "em") for c, g in zip(completions, golden_answers)]


def f1_reward(completions: Sequence[str], golden_answers: Sequence[Golden]) -> list[float]:
    """Batch F1 reward, one per completion.

    >>> f1_reward(["<answer>Eiffel Tower Paris</answer>"], ["Eiffel Tower"])
    [0.8]
    """
    _check_lengths(completions, golden_answers)
    return [answer_score(c, g, "f1") for c, g in zip(completions, golden_answers)]


def _check_lengths(completions: Sequence[str], golden_answers: Sequence[Golden]) -> None:
    if len(completions) != len(golden_answers):
        raise ValueError(f"{len(completions)} completions but {len(golden_answers)} golden answer lists")


SCORERS: dict[str, Callable[[Sequence[str], Sequence[Golden]], list[float]]] = {
    "em": em_reward,
    "f1": f1_reward,
}
"Batch scorers by name (completions, golden answers) -> rewards."
