"""Keeping Python's cyclic garbage collector off what lives as long as the process.

A full (generation 2) collection walks every tracked object. Once the embedding
model is loaded (torch, transformers: ~400,000 objects) and a person's in-memory
full-text index is built (~200,000 more at 100k items), one such collection took
310 ms, with the GIL held: every thread stops, and the pack, reply or audio that
was running waits. ``gc.freeze`` moves the objects alive now into a generation no
collection walks (the same collection then took 1 ms); reference counting still
frees them when they go.

The youngest generation is also collected less often than Python's default (after
700 more container objects made than freed): a pack holds ~3,000-5,000 at once (its
candidates, their views, sets and scores), so 1.7 young collections (~0.4 ms each)
and every few packs an older one (~1 ms) ran inside each pack, ~0.9 ms a pack at
100k items (docs/DESIGN.md, "Where a pack's time goes"). Its objects are freed by
reference counting when the pack ends, before any collection sees them.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

# Container objects made and not yet freed before the youngest generation is
# collected (Python's default: 700). Several packs at once stay under it; a
# collection of this many objects takes ~0.3 ms.
YOUNG_THRESHOLD = 20_000


def freeze_long_lived(why: str) -> None:
    """Exempt every object alive now from the cyclic collector, and collect the young
    generation after ``YOUNG_THRESHOLD`` objects (never lowered: a higher setting stays).

    Call it right after loading something that stays for the process's life.
    Cheap (no collection): garbage cycles alive at that moment are exempt too and
    never collected, a few objects against hundreds of milliseconds' stalls.
    """
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)
    # get_freeze_count walks the whole frozen list (millions once the model is in),
    # with the GIL held, on each person's first turn: only for a line that shows.
    if log.isEnabledFor(logging.DEBUG):
        log.debug("heap: %d objects exempt from collection (%s)", gc.get_freeze_count(), why)
