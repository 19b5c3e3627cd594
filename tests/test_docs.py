"""The documentation's relative links resolve: a results folder pruned, a plot left out or a doc renamed shows up
here, not as a broken page for the reader (links to other sites and ``#anchors`` alone are not checked)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"```.*?```", re.S)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def broken_links(md: Path) -> list[str]:
    """``line: target`` for each relative markdown link (outside code fences) whose file does not exist."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), md.read_text(encoding="utf-8"))
    out = []
    for m in LINK.finditer(text):
        target = m.group(1)
        path = target.split("#", 1)[0]
        if path and not SCHEME.match(target) and not target.startswith("<") and not (md.parent / path).exists():
            out.append(f"{text[:m.start()].count(chr(10)) + 1}: {target}")
    return out


def test_relative_links_in_the_docs_resolve():
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
    assert len(pages) > 10
    assert [f"{p.relative_to(ROOT)}:{b}" for p in pages for b in broken_links(p)] == []


def test_a_missing_target_is_reported(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.png").write_bytes(b"")
    page.write_text("![a](there.png) [b](gone/#x) [c](https://x.org/y) [d](#top)\n```\n[e](in-code.md)\n```\n[f](no.md)\n")
    assert broken_links(page) == ["1: gone/#x", "5: no.md"]
