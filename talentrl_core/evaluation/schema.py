"""The shape of ``metrics.json`` (schema 1) as pydantic models; ``check`` raises ``ValueError`` naming the dotted
path of the first bad value (``systems.talentrl.textworld.ci95: ...``). Extra keys are allowed everywhere: the
schema fixes what readers rely on, not everything a writer may add."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Rate = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0.0, le=1.0)]
Count = Annotated[int, Field(strict=True, ge=0)]


def _ordered(v: tuple[float, float]) -> tuple[float, float]:
    if v[0] > v[1]:
        raise ValueError(f"expected lo <= hi, got {list(v)}")
    return v


Interval = Annotated[tuple[Rate, Rate], AfterValidator(_ordered)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class SuccessBlock(_Open):
    success: Rate
    ci95: Interval
    n: Count
    tokens_per_episode: Optional[Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0.0)]] = None


class AvgAtK(_Open):
    k: Count
    value: Rate
    ci95: Interval


class PanelBlock(SuccessBlock):
    per_task_type: Optional[dict[str, SuccessBlock]] = None
    avg_at_k: Optional[AvgAtK] = None
    routing_accuracy: Optional[Rate] = None


class Metrics(_Open):
    schema_version: Literal[1] = Field(alias="schema")
    systems: Annotated[dict[str, Annotated[dict[str, PanelBlock], Field(min_length=1)]], Field(min_length=1)]
    training: Optional[dict[str, dict[str, Number]]] = None


def check(d: Any) -> None:
    """Validate ``d`` against ``Metrics``; a ``ValueError`` names the path, the problem and the value found."""
    try:
        Metrics.model_validate(d)
    except ValidationError as e:
        err = e.errors()[0]
        path = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise ValueError(f"{path}: {err['msg']}, got {err.get('input')!r}"[:500]) from None
