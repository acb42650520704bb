"""The injection score of a candidate memory (Agent Memory §5.1, MemOS WeightedMemory).

``score = w_sim·similarity + w_pri·priority + w_rec·recency + w_freq·frequency``,
each signal in [0, 1]: similarity is the fused relevance to the message,
priority the explicit priority raised to its type's floor, recency the
retention of ``memory.decay``, frequency a saturating count of accesses.
"""

from __future__ import annotations

from dataclasses import dataclass


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
class Signals:
    similarity: float
    priority: float
    recency: float
    frequency: float

    def as_dict(self) -> dict[str, float]:
        return {
            "similarity": round(self.similarity, 4),
            "priority": round(self.priority, 4),
            "recency": round(self.recency, 4),
            "frequency": round(self.frequency, 4),
        }


def frequency_signal(access_count: int, half_count: float) -> float:
    """0 for never used, 0.5 at ``half_count`` accesses, towards 1 after."""
    count = max(0, access_count)
    return count / (count + half_count)


def combine(weights: ScoreWeights, signals: Signals) -> float:
    return (
        weights.similarity * signals.similarity
        + weights.priority * signals.priority
        + weights.recency * signals.recency
        + weights.frequency * signals.frequency
    )
