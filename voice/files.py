"""Reply audio kept on disk for a while, so clients can fetch it by URL.

Names are random (``<32 hex>.ogg`` or ``.wav``) and are the only thing a
client can ask for: ``path_of`` refuses anything else, so no request can
reach outside the folder. Every method blocks (file I/O): call it in a thread.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Literal

from gateway.config import Config

log = logging.getLogger(__name__)

AudioFormat = Literal["ogg", "wav"]
CONTENT_TYPES: dict[str, str] = {"ogg": "audio/ogg", "wav": "audio/wav"}
_NAME = re.compile(r"^[0-9a-f]{32}\.(ogg|wav)$")


class AudioFiles:
    def __init__(self, folder: Path, retention_s: float, prune_every_s: float = 60.0) -> None:
        self.folder = folder
        self.retention_s = retention_s
        self.prune_every_s = prune_every_s
        self._last_prune = 0.0

    @classmethod
    def from_config(cls, config: Config) -> AudioFiles:
        folder = (
            Path(config.voice.audio_dir) if config.voice.audio_dir else config.data_dir / "audio"
        )
        return cls(folder, config.voice.audio_retention_s)

    def save(self, data: bytes, fmt: AudioFormat) -> str:
        """Write one file and return its name; old files are pruned now and then."""
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"{uuid.uuid4().hex}.{fmt}"
        tmp = self.folder / f".{name}.tmp"
        tmp.write_bytes(data)
        # Renamed into place so a client never fetches a half-written file.
        os.replace(tmp, self.folder / name)
        now = time.monotonic()
        if now - self._last_prune >= self.prune_every_s:
            self._last_prune = now
            self.prune()
        return name

    def path_of(self, name: str) -> Path | None:
        """The file's path when ``name`` is one of ours and still there."""
        if not _NAME.match(name):
            return None
        path = self.folder / name
        return path if path.is_file() else None

    def prune(self) -> int:
        """Delete files older than the retention; returns how many."""
        if not self.folder.is_dir():
            return 0
        cutoff = time.time() - self.retention_s
        removed = 0
        for entry in os.scandir(self.folder):
            if not _NAME.match(entry.name):
                continue
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                continue  # another prune got there first
        if removed:
            log.info("pruned %d reply audio files older than %g s", removed, self.retention_s)
        return removed


def content_type(name: str) -> str:
    return CONTENT_TYPES[name.rsplit(".", 1)[-1]]
