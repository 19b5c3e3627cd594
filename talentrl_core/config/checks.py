"""The range rules of the config sections' ``__post_init__`` checks: ``check_ranges`` names the first field outside its
range as ``section.key=value: must be ...``."""

from __future__ import annotations

POSITIVE = ("> 0", lambda v: v > 0)
NON_NEGATIVE = (">= 0", lambda v: v >= 0)
AT_LEAST_1 = (">= 1", lambda v: v >= 1)
COSINE = ("in [-1, 1]", lambda v: -1.0 <= v <= 1.0)


def check_ranges(section: str, obj, **rules: tuple) -> None:
    """Raise ValueError ``section.key=value: must be ...`` for the first field outside its range.

    >>> check_ranges("sft", type("C", (), {"lr": 0.0})(), lr=POSITIVE)
    Traceback (most recent call last):
    ...
    ValueError: sft.lr=0.0: must be > 0
    """
    for name, (what, ok) in rules.items():
        value = getattr(obj, name)
        if not ok(value):
            raise ValueError(f"{section + '.' if section else ''}{name}={value!r}: must be {what}")
