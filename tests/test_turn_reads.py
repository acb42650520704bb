"""The context stages' declared reads: a turn's run together, in one hop to a reader
thread, when the first is asked for; each stage takes its own result or error."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text

from gateway.errors import StoreError
from gateway.prompt import PromptDraft, StageRead, TurnReads
from gateway.store import Store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(f"sqlite+aiosqlite:///{tmp_path / 'reads.db'}") as opened:
        yield opened


def counting_hops(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per ``store.read`` call (a hop to a reader thread)."""
    hops: list[int] = []
    read = store.read

    async def counted(work: Callable[[Connection], Any]) -> Any:
        hops.append(1)
        return await read(work)

    monkeypatch.setattr(store, "read", counted)
    return hops


def selecting(value: int) -> StageRead[int]:
    return StageRead(
        f"read-{value}", lambda c: int(c.execute(text(f"SELECT {value}")).scalar_one())
    )


async def test_declared_reads_run_in_one_hop(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    hops = counting_hops(store, monkeypatch)
    reads = [selecting(n) for n in (1, 2, 3)]
    draft = PromptDraft(reads=TurnReads(store, reads))
    assert hops == []  # declared only: nothing read yet
    assert await draft.read(reads[1], store) == 2
    assert await draft.read(reads[0], store) == 1
    assert await draft.read(reads[2], store) == 3
    assert len(hops) == 1


async def test_an_undeclared_read_and_a_draft_without_reads_read_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops = counting_hops(store, monkeypatch)
    draft = PromptDraft(reads=TurnReads(store, [selecting(1)]))
    assert await draft.read(selecting(7), store) == 7
    assert await PromptDraft().read(selecting(8), store) == 8
    assert len(hops) == 2


async def test_a_failing_read_fails_only_the_stage_that_declared_it(store: Store) -> None:
    broken = StageRead("broken", lambda c: c.execute(text("SELECT * FROM no_such_table")).all())
    good = selecting(5)
    draft = PromptDraft(reads=TurnReads(store, [broken, good]))
    with pytest.raises(StoreError, match="no_such_table"):
        await draft.read(broken, store)
    assert await draft.read(good, store) == 5
