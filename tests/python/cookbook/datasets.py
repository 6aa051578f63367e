"""Stand-in for Hugging Face `datasets`: in-memory rows the test registers under a name."""

from __future__ import annotations

import random
from typing import Any, Iterable

_REGISTRY: dict[str, dict[str, list[dict]]] = {}


def register(name: str, splits: dict[str, list[dict]]) -> None:
    _REGISTRY[name] = splits


class Dataset:
    def __init__(self, rows: list[dict]) -> None:
        self._rows = list(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self):
        return iter(self._rows)

    def __getitem__(self, key: Any):
        if isinstance(key, str):
            return [row[key] for row in self._rows]
        return self._rows[key]

    def select(self, indices: Iterable[int]) -> "Dataset":
        return Dataset([self._rows[i] for i in indices])

    def shuffle(self, seed: int = 0) -> "Dataset":
        rows = list(self._rows)
        random.Random(seed).shuffle(rows)
        return Dataset(rows)


class DatasetDict(dict):
    pass


def load_dataset(name: str, *args: Any, **kwargs: Any) -> DatasetDict:
    return DatasetDict({split: Dataset(rows) for split, rows in _REGISTRY[name].items()})
