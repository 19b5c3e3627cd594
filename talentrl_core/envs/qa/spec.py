"""Search-QA's registry entry (``envs/registry.py``): cheap to import, the family is loaded by ``factory``."""

from __future__ import annotations

import re

from ..base import FamilySpec, lazy_family
from ..syntax import INVALID, parse_qa, verbatim

_QA_RE = re.compile(r"^\s*<(search|answer)>(.*?)</\1>\s*$", re.S)



def action_template(a: str) -> str:
    """The template of a normalised command (Search-R1 protocol): ``search {query}``, ``answer`` or invalid.

    >>> action_template("<search>capital of france</search>"), action_template("<answer>paris</answer>")
    ('search {query}', 'answer')
    """
    m = _QA_RE.match(a)
    kind = m.group(1) if m else (a.split()[0].rstrip(":") if a.split()[0].rstrip(":") in ("search", "answer") else None)
    if kind == "search":
        return "search {query}"
    if kind == "answer":
        return "answer"
    return INVALID


SPEC = FamilySpec(
    name="qa",
    factory=lazy_family("talentrl_core.envs.qa.env:QAFamily"),
    rule=(
        "Answer the question. Reason in <think></think>. To look something up write "
        "<search>query</search>; results come back in <information></information>. "
        "Finish with <answer>short answer</answer>."
    ),
    description="search-augmented question answering; the agent writes <search>query</search> to get passages "
    "and finishes with <answer>short answer</answer>.",
    panel_prefix="qa_",
    panel_help=("qa_<set>",),
    parse=parse_qa,
    wrap=verbatim,
    template=action_template,
    data_fields=("qa_train_file", "corpus"),
)
