"""One agentgw at a time per data directory.

Two gateways on one directory would share the database (SQLite copes) but not
the memory layer: each keeps its own in-memory indexes, finds only the items
it stored itself, and overwrites the other's index files at every save. And
``agentgw vacuum`` rewrites the database, which a running gateway must not be
writing meanwhile. So the gateway holds an OS lock (``flock``) on
``<data_dir>/agentgw.lock`` while it runs, and vacuum takes the same lock.
The kernel releases it when the process ends, however it ends: a crash leaves
nothing stale to clean up. The file itself stays; it holds the last holder's
pid, for the error message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from gateway.errors import StoreError


class DataDirInUse(StoreError):
    code = "data_dir_in_use"


class DataDirLock:
    """The lock on one data directory; ``acquire`` fails at once if it is held."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "agentgw.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise DataDirInUse(
                f"{self.path.parent} is in use by another agentgw (pid {holder}); stop it first"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        # Closing the descriptor releases the lock.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()
