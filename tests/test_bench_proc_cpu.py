"""CPU seconds from /proc: a process's children count in its tree, live and reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gateway.bench.proc_cpu import cpu_seconds, tree_cpu_seconds

# A child that spins for this long, then waits for its stdin to close.
SPIN = (
    "import sys, time\n"
    "end = time.process_time() + {s}\n"
    "while time.process_time() < end: pass\n"
    "print('spun', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_child_s_cpu_counts_in_the_tree_while_it_runs_and_once_reaped() -> None:
    pid = os.getpid()
    before_tree = tree_cpu_seconds(pid)
    before_own = cpu_seconds(pid)
    with subprocess.Popen(
        [sys.executable, "-c", SPIN.format(s=0.5)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as child:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline().strip() == b"spun"
        # Alive: its own utime and stime.
        running = tree_cpu_seconds(pid) - before_tree - (cpu_seconds(pid) - before_own)
        assert running >= 0.4
        child.stdin.close()
        child.wait()
    time.sleep(0.01)
    # Reaped: the parent's cutime and cstime.
    reaped = tree_cpu_seconds(pid) - before_tree - (cpu_seconds(pid) - before_own)
    assert reaped >= 0.4
