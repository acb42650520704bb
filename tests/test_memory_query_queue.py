"""The packs' queries of concurrent turns share one model call (issue 28, CPU per turn)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from gateway.store import Store
from gateway.store.repo import resolve_address
from memory.service import Episode, MemoryService, PackRequest
from tests.conftest import make_config

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


class HeldEmbedder:
    """Word-hash vectors; every call recorded; calls can be held. Says it runs queries on
    ONNX Runtime, the runtime whose queries go through the queries' queue."""

    dim = 32
    model_name = "held-words"
    query_runtime = "onnx"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.release.set()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.release.wait(5)
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[row] /= float(np.linalg.norm(out[row])) or 1.0
        return out


async def test_concurrent_queries_share_one_model_call(tmp_path: Path) -> None:
    config = make_config(tmp_path, memory={"embedder": "minilm"})
    async with Store(config.database_url) as store:
        address = await resolve_address(store, "webchat", "session-q", display_name="Sam")
        model = HeldEmbedder()
        service = MemoryService(store, config.memory, config.data_dir / "memory-index", model)
        try:
            await service.ingest(
                [
                    Episode(
                        person_id=address.person_id,
                        text=text,
                        at=T0 + timedelta(minutes=n),
                        role="user",
                        speaker="Sam",
                        conversation_id=address.conversation_id,
                        source_ref=f"m{n}",
                    )
                    for n, text in enumerate(
                        ["My cat is called Miso.", "My sister Ana lives in Lisbon."]
                    )
                ]
            )
            alone = await service.build_pack(
                PackRequest(address.person_id, "where does my sister live", T0 + timedelta(days=1))
            )
            before = len(model.calls)
            model.release.clear()
            questions = ["what is my cat called", "where does my sister live", "who is Ana"]
            held = asyncio.create_task(
                service.build_pack(PackRequest(address.person_id, "hello", T0 + timedelta(days=1)))
            )
            await asyncio.sleep(0.1)  # its query's call is running, held
            packs = [
                asyncio.create_task(
                    service.build_pack(
                        PackRequest(address.person_id, question, T0 + timedelta(days=1))
                    )
                )
                for question in questions
            ]
            await asyncio.sleep(0.1)
            model.release.set()
            await held
            done = await asyncio.gather(*packs)
            # One call for the held query, one for the three that waited behind it.
            assert model.calls[before:] == [["hello"], questions]
            # A query's pack is the same whether it went alone or with others.
            assert done[1].text == alone.text
            assert "Lisbon" in alone.text
        finally:
            await service.aclose()
