"""Building SDK dataclasses from reply dicts: known fields only, so newer daemons that add
fields (a class-version bump) keep working with this SDK."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def from_wire(cls: type[T], obj: dict, **nested: Any) -> T:
    """cls(**fields of obj that cls declares), with `nested` overriding converted fields."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in obj.items() if k in names}
    values.update(nested)
    return cls(**values)
