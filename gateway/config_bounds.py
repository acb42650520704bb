"""The ranges of the numeric config keys, declared on the fields and checked by pydantic.

A numeric key of a config section is annotated with its range, next to its
default: ``port: TcpPort = 8080``, ``temperature: Annotated[float, Field(ge=0,
le=2)] = 0.7``. ``check_value`` validates one loaded value against that
declaration with a pydantic ``TypeAdapter`` and turns pydantic's error into the
gateway's own, which names the key: ``brain.temperature: must be in [0, 2], got
-1.0``. The sections stay frozen stdlib dataclasses (``config.section.key``,
hashable); only the check is pydantic's.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

import annotated_types
from pydantic import Field, TypeAdapter, ValidationError

from gateway.errors import ConfigError


@dataclass(frozen=True)
class Says:
    """A refusal worded for one key, instead of the range: ``{value}`` is the value."""

    template: str


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
# A share or a similarity: 0 to 1, both ends allowed.
Share = Annotated[float, Field(ge=0, le=1)]
# A smoothing factor or a tier line: above 0, at most 1.
Rate = Annotated[float, Field(gt=0, le=1)]
TcpPort = Annotated[int, Field(gt=0, lt=65536), Says("{value} is not a TCP port")]


@dataclass(frozen=True)
class Bounds:
    """A key's declared range; None where that side is open."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        low = self.ge if self.ge is not None else self.gt
        high = self.le if self.le is not None else self.lt
        if high is None:
            if low == 0:
                return "must be 0 or more" if self.ge is not None else "must be positive"
            return f"must be {low} or more" if self.ge is not None else f"must be more than {low}"
        if low is None:
            return f"must be {high} or less" if self.le is not None else f"must be below {high}"
        opening = "[" if self.ge is not None else "("
        closing = "]" if self.le is not None else ")"
        return f"must be in {opening}{low}, {high}{closing}"


def _metadata(annotation: Any) -> list[Any]:
    """The flat metadata of an ``Annotated`` hint, a pydantic ``Field``'s opened up."""
    items: list[Any] = []
    for item in get_args(annotation)[1:]:
        items.extend(getattr(item, "metadata", [item]))
    return items


def bounds_of(annotation: Any) -> Bounds:
    values: dict[str, float] = {}
    for item in _metadata(annotation):
        for side in ("ge", "gt", "le", "lt"):
            if isinstance(item, annotated_types.BaseMetadata) and hasattr(item, side):
                values[side] = getattr(item, side)
    return Bounds(**values)


# Per section class, filled on first use: the classes are few and never change.
_DECLARED: dict[type[Any], dict[str, Any]] = {}
_ADAPTERS: dict[tuple[type[Any], str], TypeAdapter[Any]] = {}


def declared(cls: type[Any]) -> dict[str, Any]:
    """The fields of a section dataclass that declare a range, with their hints."""
    if cls not in _DECLARED:
        hints = typing.get_type_hints(cls, include_extras=True)
        _DECLARED[cls] = {
            name: hint for name, hint in hints.items() if get_origin(hint) is Annotated
        }
    return _DECLARED[cls]


def _adapter(cls: type[Any], name: str) -> TypeAdapter[Any]:
    if (cls, name) not in _ADAPTERS:
        _ADAPTERS[cls, name] = TypeAdapter(declared(cls)[name])
    return _ADAPTERS[cls, name]


def check_value(key: str, cls: type[Any], name: str, value: Any) -> None:
    """Raise ``ConfigError`` naming ``key`` when ``value`` is outside its declared range."""
    if name not in declared(cls):
        return
    try:
        # Strict: the value is already of the field's type (config._coerce made it so);
        # only the range is left to check.
        _adapter(cls, name).validate_python(value, strict=True)
    except ValidationError as exc:
        annotation = declared(cls)[name]
        says = [item for item in _metadata(annotation) if isinstance(item, Says)]
        if says:
            raise ConfigError(f"{key}: {says[0].template.format(value=value)}") from exc
        raise ConfigError(f"{key}: {bounds_of(annotation).describe()}, got {value}") from exc
