"""Markdown helpers shared by the report's sections."""

from __future__ import annotations


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table; ``|`` inside a cell is escaped.

    >>> print(md_table(["a", "b"], [["1", "x|y"]]))
    | a | b |
    |---|---|
    | 1 | x\\|y |
    """
    esc = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
