"""Stand-in for `chz`: a config class is a frozen dataclass; `chz.replace` copies with changes."""

from __future__ import annotations

import dataclasses


def chz(cls):
    return dataclasses.dataclass(frozen=True)(cls)


def replace(obj, **changes):
    return dataclasses.replace(obj, **changes)
