"""What the benches show a person while they run, and how they end.

- :func:`progress`: a tqdm bar on stderr, only when stderr is a terminal, so a
  bench's JSON on stdout stays parseable and logs of a CI run stay clean.
- :class:`Target` and :func:`print_verdicts`: one ``PASS`` or ``MISS`` line per
  target, last. With ``--json`` they go to stderr, so stdout holds only the JSON
  (whose figures they are made from). A miss never changes the exit status: the
  figures are measurements on a shared machine, not a test.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from tqdm import tqdm


def progress(total: int, description: str, unit: str = "it", *, file: TextIO | None = None) -> Any:
    """A progress bar to ``update()`` and ``close()`` (or use in ``with``); a
    no-op when ``file`` (stderr by default) is not a terminal."""
    stream = sys.stderr if file is None else file
    return tqdm(
        total=total,
        desc=description,
        unit=unit,
        file=stream,
        disable=not stream.isatty(),
        leave=False,  # the bar goes once done: the summary that follows is what stays
        dynamic_ncols=True,
    )


@dataclass(frozen=True)
class Target:
    """One target a bench checks: ``"pack p95 <= 25 ms"`` and the figure measured."""

    name: str
    met: bool
    measured: str

    def line(self) -> str:
        return f"{'PASS' if self.met else 'MISS'}  {self.name} (measured: {self.measured})"


def at_most(name: str, value: float | None, limit: float, unit: str) -> Target:
    """``value <= limit``; a figure that was not measured (None) misses."""
    shown = "not measured" if value is None else f"{value:g} {unit}".rstrip()
    return Target(
        f"{name} <= {limit:g} {unit}".rstrip(), value is not None and value <= limit, shown
    )


def print_verdicts(targets: Sequence[Target], *, as_json_output: bool) -> None:
    """The PASS / MISS lines, after everything else the bench printed."""
    stream = sys.stderr if as_json_output else sys.stdout
    for target in targets:
        print(target.line(), file=stream)
    stream.flush()
