"""Evaluation (DESIGN.md §6): confidence intervals, the metrics schema, and the Markdown/PNG report.

Importing this package is cheap: matplotlib is imported only when a plot is drawn.
"""

from .metrics import EpisodeResult, build_metrics, routing_confusion, validate_metrics
from .report import render_markdown, write_report
from .stats import avg_at_k, bootstrap_ci, intervals_overlap, wilson_ci

__all__ = [
    "EpisodeResult",
    "avg_at_k",
    "bootstrap_ci",
    "build_metrics",
    "intervals_overlap",
    "render_markdown",
    "routing_confusion",
    "validate_metrics",
    "wilson_ci",
    "write_report",
]
