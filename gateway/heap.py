"""Keeping Python's cyclic garbage collector off what lives as long as the process.

A full (generation 2) collection walks every tracked object. Once the embedding
model is loaded (torch, transformers: ~400,000 objects) and a person's in-memory
full-text index is built (~200,000 more at 100k items), one such collection took
310 ms, with the GIL held: every thread stops, and the pack, reply or audio that
was running waits. ``gc.freeze`` moves the objects alive now into a generation no
collection walks (the same collection then took 1 ms); reference counting still
frees them when they go.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_long_lived(why: str) -> None:
    """Exempt every object alive now from the cyclic collector.

    Call it right after loading something that stays for the process's life.
    Cheap (no collection): garbage cycles alive at that moment are exempt too and
    never collected, a few objects against hundreds of milliseconds' stalls.
    """
    gc.freeze()
    # get_freeze_count walks the whole frozen list (millions once the model is in),
    # with the GIL held, on each person's first turn: only for a line that shows.
    if log.isEnabledFor(logging.DEBUG):
        log.debug("heap: %d objects exempt from collection (%s)", gc.get_freeze_count(), why)
