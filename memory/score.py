"""The injection score of a candidate memory (Agent Memory §5.1, MemOS WeightedMemory).

``score = w_sim·similarity + w_pri·priority + w_rec·recency + w_freq·frequency``,
each signal in [0, 1]: similarity is the fused relevance to the message,
priority the explicit priority raised to its type's floor, recency the
retention of ``memory.decay``, frequency a saturating count of accesses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class ScoreWeights:
    similarity: float
    priority: float
    recency: float
    frequency: float

    def normalised(self) -> ScoreWeights:
        total = self.similarity + self.priority + self.recency + self.frequency
        if total <= 0:
            raise ValueError("score weights must not all be zero")
        return ScoreWeights(
            self.similarity / total,
            self.priority / total,
            self.recency / total,
            self.frequency / total,
        )


@dataclass(frozen=True)
class SignalColumns:
    """The signals of every candidate of a pack, an entry per candidate in each array:
    a pack scores a hundred candidates at once."""

    similarity: NDArray[np.float64]
    priority: NDArray[np.float64]
    recency: NDArray[np.float64]
    frequency: NDArray[np.float64]

    def as_dicts(self) -> list[dict[str, float]]:
        """Each candidate's signals by name, rounded to 4 places (for its trace)."""
        names = ("similarity", "priority", "recency", "frequency")
        # Rounded a column at a time: a pack's trace holds a hundred and fifty of these.
        columns = [[round(v, 4) for v in getattr(self, name).tolist()] for name in names]
        return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]

    def scores(self, weights: ScoreWeights) -> NDArray[np.float64]:
        """Each candidate's weighted sum of its signals."""
        return (
            weights.similarity * self.similarity
            + weights.priority * self.priority
            + weights.recency * self.recency
            + weights.frequency * self.frequency
        )


def frequency_signal(access_counts: NDArray[np.float64], half_count: float) -> NDArray[np.float64]:
    """0 for never used, 0.5 at ``half_count`` accesses, towards 1 after (per entry)."""
    counts = np.maximum(0.0, access_counts)
    return counts / (counts + half_count)
