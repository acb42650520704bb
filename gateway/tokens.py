"""Token estimates where no tokenizer is at hand (budgets, stored counts)."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """About four characters a token for English prose; never zero for text."""
    return (len(text) + 3) // 4
