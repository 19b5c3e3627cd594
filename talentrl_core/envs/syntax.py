"""Action syntax shared by the families' specs: tag parsing, the SFT label wrapper, the per-family parts of the
distillers' action templates. Pure functions of text (no family's dependencies), so ``registry`` can load every
family's ``spec`` cheaply and ``prompts`` / ``library.templates`` can use them without importing an environment.
"""

from __future__ import annotations

from typing import Optional, Sequence

INVALID = "(invalid command)"
"The template of an invalid step (``library.templates``)."


def _last_tag(text: str, tag: str) -> Optional[str]:
    """The body of the last complete ``<tag>…</tag>`` in linear time (a regex over a flood of unclosed tags is
    quadratic: seconds for a 64 kB completion). None when there is none.

    >>> _last_tag("<a>1</a> <a>2</a><a>3", "a")
    '2'
    """
    open_, close = f"<{tag}>", f"</{tag}>"
    end = text.rfind(close)
    start = text.rfind(open_, 0, end) if end >= 0 else -1
    if start < 0:
        return None
    end = text.find(close, start + len(open_))  # the first close after that open (non-greedy, as a regex would)
    return text[start + len(open_): end]


def _first_tag(text: str, tags: Sequence[str]) -> Optional[tuple[str, str]]:
    """(tag, body) of the earliest complete ``<tag>…</tag>`` among ``tags``, in linear time."""
    best: Optional[tuple[int, str, str]] = None
    for tag in tags:
        start = text.find(f"<{tag}>")
        end = text.find(f"</{tag}>", start + len(tag) + 2) if start >= 0 else -1
        if end >= 0 and (best is None or start < best[0]):
            best = (start, tag, text[start + len(tag) + 2: end])
    return (best[1], best[2]) if best else None


def parse_action(completion: str) -> Optional[str]:
    """The command in the last ``<action>`` tag, stripped; None when there is none or it is empty.

    >>> parse_action("<think>go</think><action> go to desk 1 </action>")
    'go to desk 1'
    >>> parse_action("go to desk 1") is None
    True
    """
    found = _last_tag(completion, "action")
    if found is None:
        return None
    act = " ".join(found.split())
    return act or None


def parse_qa(completion: str) -> Optional[str]:
    """The first complete Search-R1 tag of a QA completion, normalised to ``<search>q</search>`` or
    ``<answer>a</answer>``; None when neither is present.

    >>> parse_qa("<think>who?</think><search> capital of France </search>")
    '<search>capital of France</search>'
    """
    m = _first_tag(completion, ("search", "answer"))
    if not m:
        return None
    kind, body = m[0], " ".join(m[1].split())
    return f"<{kind}>{body}</{kind}>" if body else None


def action_tag(action: str) -> str:
    """An expert command as the policy writes it: ``<action>…</action>`` (the default label syntax)."""
    return f"<action>{action}</action>"


def verbatim(action: str) -> str:
    """An expert action already in the family's own syntax (QA's ``<search>``/``<answer>``)."""
    return action
