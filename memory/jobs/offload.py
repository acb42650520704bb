"""CPU-bound job work kept off the serving process's GIL (issue 21).

A pack is a chain of short steps, in the event loop and in worker threads
(the query's embedding, the ANN search, SQLite's reads, the scoring), each of
which takes the GIL again when it resumes. A job step that runs pure Python in
a thread of the same process keeps the GIL for Python's switch interval (5 ms)
each time it gets it, so every hand-off of a pack may wait up to 5 ms behind
it: the nightly's grouping of merge candidates, run in a worker thread, made
packs 3.6 times slower at p95 on a 100k store while it ran (docs/DESIGN.md,
"Nightly upkeep and the session flush").

``CpuWork`` runs such steps in a child process with its own GIL, for the
length of a job run (``[upkeep_jobs] cpu_work = "process"``, the default), or
in a worker thread as before (``"thread"``: no second process, and the figure
the process is measured against). Only pure functions cross: module-level
callables whose arguments and result pickle (vectors, candidates, groups);
the store, the indexes and every write stay in the serving process.

The child is ``python -m memory.jobs.cpu_child`` (memory/jobs/cpu_child.py),
started with ``asyncio.create_subprocess_exec``: each call is one pickled
frame on its stdin, each reply one on its stdout. Not multiprocessing's pool:
its spawned (and fork-server) children import the parent's main module again
before the first call, which for ``agentgw`` is the whole gateway. Measured on
the nightly bench (a 10k store, load 6 on 2 cores), that was 2.6 s of CPU a
run in the child, competing with the packs for the cores; this child imports
only the module of the function it is handed (the merge's plan: numpy, the
guard, hnswlib). Not forked from the serving process either: it has threads
(the store's, the indexes'), and a forked child may inherit a lock one of them
held.

Lifecycle: the child starts at the first ``run`` of a job run (a run with
nothing to compute starts nothing) and ends when the run does: stdin closed,
the child exits and is waited for. A run cut short (the gateway stopping, a
failure) kills the child at once, a step under way included. A serving process
killed with -9 takes its child along: the child watches its parent and exits
when it is gone (memory/jobs/cpu_child.py). A child that dies mid-step fails
the run with ``JobProcessFailed``; the next run starts another.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pickle
import struct
import sys
from collections.abc import Callable
from types import TracebackType
from typing import ParamSpec, Self, TypeVar, cast

from gateway.config import CpuWorkKind
from memory.errors import JobProcessFailed

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# A frame's length, before its pickle (both ways).
FRAME = struct.Struct("!Q")
CHILD_MODULE = "memory.jobs.cpu_child"
# Pipe buffer of the child's reply stream: a reply (groups of a big run) can be MBs.
_READ_LIMIT = 2**20
# The child's numeric libraries on one thread each, read when they load. With their
# defaults (a thread per core) OpenBLAS and scikit-learn's OpenMP spin on both cores
# of a 2-core machine between calls: the tree's plan at 100k items took 70 s of CPU
# and 77 s of wall time with them, 19 s and 29 s on one thread (docs/DESIGN.md).
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class CpuWork:
    """Where a job run's CPU-bound steps run: ``async with CpuWork(kind) as cpu:
    result = await cpu.run(fn, *args)``. One step at a time."""

    def __init__(self, kind: CpuWorkKind = "process") -> None:
        self.kind: CpuWorkKind = kind
        self._child: asyncio.subprocess.Process | None = None
        self._turn = asyncio.Lock()
        self._closed = False
        # Steps handed to the child (none in thread mode), and the child's pid.
        self.calls = 0
        self.pid: int | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose(cut=exc_type is not None)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` in the child process (or a worker thread); ``fn``
        must be a module-level function, its arguments and result picklable."""
        call = functools.partial(fn, *args, **kwargs)
        if self.kind == "thread":
            return await asyncio.to_thread(call)
        async with self._turn:
            if self._closed:
                raise RuntimeError("CpuWork is closed")
            child = self._child or await self._start()
            self.calls += 1
            try:
                ok, value = await self._exchange(child, call)
            except BaseException:
                # Cancelled or broken mid-frame: the stream's state is unknown.
                await self._kill()
                raise
        if not ok:
            if isinstance(value, str):
                raise JobProcessFailed(f"a step of the upkeep job's process failed: {value}")
            raise cast(BaseException, value)
        return cast(T, value)

    async def _start(self) -> asyncio.subprocess.Process:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            CHILD_MODULE,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_READ_LIMIT,
            env={**os.environ, **ONE_THREAD},
        )
        self._child, self.pid = child, child.pid
        log.debug("upkeep: process %d for the job's CPU-bound steps", child.pid)
        return child

    async def _exchange(
        self, child: asyncio.subprocess.Process, call: Callable[[], object]
    ) -> tuple[bool, object]:
        assert child.stdin is not None
        assert child.stdout is not None
        payload = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        child.stdin.write(FRAME.pack(len(payload)) + payload)
        try:
            await child.stdin.drain()
            (size,) = FRAME.unpack(await child.stdout.readexactly(FRAME.size))
            reply = await child.stdout.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            code = await child.wait()
            raise JobProcessFailed(
                f"the upkeep job's process (pid {child.pid}) ended mid-step, exit code {code}"
            ) from exc
        return cast(tuple[bool, object], pickle.loads(reply))

    async def _kill(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            child.kill()
            await child.wait()

    async def aclose(self, *, cut: bool = False) -> None:
        """End the child: it exits at the end of its input and is waited for, or with
        ``cut`` (a run cancelled or failed) it is killed, a step under way included."""
        self._closed = True
        if cut:
            await self._kill()
            return
        child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None
        child.stdin.close()
        code = await child.wait()
        if code != 0:
            log.warning("upkeep: the job's process %d ended with code %d", child.pid, code)
