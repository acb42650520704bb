"""Splitting replies under Telegram's limit, and the flood-control layer."""

from __future__ import annotations

import itertools
import random
import re
import time
import warnings
from datetime import timedelta
from typing import Any

import pytest
from telegram.error import NetworkError, RetryAfter
from telegram.warnings import PTBDeprecationWarning

from channels.telegram_send import (
    TelegramRateLimiter,
    retry_after_seconds,
    split_message,
    utf16_len,
)
from channels.telegram_text import persona_summary


@pytest.fixture(autouse=True)
def _timedelta_periods(monkeypatch: pytest.MonkeyPatch) -> None:
    # PTB 22's documented opt-in to its next major's time periods; without it
    # every RetryAfter warns, which this suite turns into errors.
    monkeypatch.setenv("PTB_TIMEDELTA", "true")


def squash(text: str) -> str:
    """The text without whitespace: what a split may drop at its cuts."""
    return re.sub(r"\s+", "", text)


def test_short_text_is_one_message() -> None:
    assert split_message("  hello there \n") == ["hello there"]
    assert split_message("   ") == []


def test_splits_at_paragraphs_first() -> None:
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(12)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    parts = split_message(text, 4096)
    assert len(parts) > 1
    assert all(utf16_len(p) <= 4096 for p in parts)
    # Every part is made of whole paragraphs.
    for part in parts:
        assert part.startswith("Paragraph ")
        assert part.endswith("word")
    assert "\n\n".join(parts) == text


def test_splits_at_sentences_then_words() -> None:
    sentences = " ".join(f"Sentence number {i} ends here." for i in range(400))
    parts = split_message(sentences, 500)
    assert all(utf16_len(p) <= 500 for p in parts)
    assert all(p.endswith("ends here.") for p in parts)
    assert " ".join(parts) == sentences

    words = " ".join(["supercalifragilistic"] * 300)
    parts = split_message(words, 333)
    assert all(utf16_len(p) <= 333 for p in parts)
    assert all(set(p.split()) == {"supercalifragilistic"} for p in parts)


def test_counts_utf16_units_like_telegram() -> None:
    # An emoji outside the BMP counts twice: 3000 of them need two messages.
    text = "😀" * 3000
    parts = split_message(text, 4096)
    assert [utf16_len(p) for p in parts] == [4096, 1904]
    assert "".join(parts) == text


def test_never_splits_a_character_sequence() -> None:
    # e + combining acute, and a ZWJ family emoji, in one unbroken run.
    accented = "e\u0301" * 300
    for part in split_message(accented, 101):
        assert not part.startswith("\u0301")
    family = "👩\u200d👩\u200d👧" * 40
    for part in split_message(family, 51):
        assert not part.startswith("\u200d")
        assert not part.endswith("\u200d")
    assert "".join(split_message(family, 51)) == family


def test_random_texts_rejoin_and_fit() -> None:
    rng = random.Random(5)
    alphabet = ["a", "b", "é", " ", " ", "\n", "\n\n", ". ", "😀", "<b>", "&amp;", "\\", "*_`"]
    for _ in range(50):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3000)))
        limit = rng.randint(20, 700)
        parts = split_message(text, limit)
        assert all(0 < utf16_len(p) <= limit for p in parts)
        assert squash("".join(parts)) == squash(text)


def test_persona_summary_is_the_opening() -> None:
    persona = "# Ada\n\nYou are Ada, one assistant.\nShe is kind.\n\n## Voice\n- Direct."
    assert persona_summary(persona) == "Ada\n\nYou are Ada, one assistant.\nShe is kind."


class FlakyCall:
    """A Bot API call that hits flood control ``floods`` times, then succeeds."""

    def __init__(self, floods: int, retry_after: int = 1) -> None:
        self.floods = floods
        self.retry_after = retry_after
        self.times: list[float] = []

    async def __call__(self) -> dict[str, Any]:
        self.times.append(time.monotonic())
        if len(self.times) <= self.floods:
            raise RetryAfter(self.retry_after)
        return {"ok": True}


def limiter(max_retries: int = 3) -> TelegramRateLimiter:
    return TelegramRateLimiter(
        per_second=100, chat_per_second=100, chat_burst=10, max_retries=max_retries
    )


async def test_retry_after_waits_and_resends() -> None:
    call = FlakyCall(floods=1, retry_after=1)
    rl = limiter()
    result = await rl.process_request(call, (), {}, "sendMessage", {"chat_id": 1}, None)
    assert result == {"ok": True}
    assert len(call.times) == 2
    assert call.times[1] - call.times[0] >= 1.0  # it waited as long as Telegram asked
    assert rl.retries == 1


async def test_retry_after_gives_up_after_max_retries() -> None:
    call = FlakyCall(floods=5, retry_after=0)
    with pytest.raises(RetryAfter):
        await limiter(max_retries=2).process_request(
            call, (), {}, "sendMessage", {"chat_id": 1}, None
        )
    assert len(call.times) == 3


async def test_other_errors_are_not_retried_here() -> None:
    calls = 0

    async def broken() -> bool:
        nonlocal calls
        calls += 1
        raise NetworkError("Bad Gateway")

    with pytest.raises(NetworkError):
        await limiter().process_request(broken, (), {}, "sendMessage", {"chat_id": 1}, None)
    assert calls == 1


async def test_get_updates_is_left_to_the_updater() -> None:
    call = FlakyCall(floods=1, retry_after=0)
    with pytest.raises(RetryAfter):
        await limiter().process_request(call, (), {}, "getUpdates", {}, None)
    assert len(call.times) == 1


async def test_chat_rate_spaces_out_a_burst() -> None:
    rl = TelegramRateLimiter(per_second=100, chat_per_second=20, chat_burst=2, max_retries=0)
    sent: list[float] = []

    async def send() -> bool:
        sent.append(time.monotonic())
        return True

    for _ in range(6):
        await rl.process_request(send, (), {}, "sendMessage", {"chat_id": 7}, None)
    # Two go at once (the burst), the rest one token (1/20 s) apart at least.
    gaps = [b - a for a, b in itertools.pairwise(sent[1:])]
    assert all(gap >= 0.04 for gap in gaps)


def test_retry_after_seconds_reads_both_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert retry_after_seconds(RetryAfter(timedelta(seconds=2.5))) == 2.5
    monkeypatch.delenv("PTB_TIMEDELTA")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        flood = RetryAfter(3)
    # The int form, as PTB 22 returns it by default, read without a warning.
    assert retry_after_seconds(flood) == 3.0
