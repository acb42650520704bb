"""CPU seconds from ``/proc``: of a process, of a process and its children, of the machine.

A turns/s figure on a 2-core machine shared with other work moves with that
work; CPU seconds per turn move much less. The benches snapshot these before
and after their measured window. Linux only, as the benches are.
"""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields_of(path: str) -> list[str]:
    with open(path, encoding="ascii") as stat:
        # The command name may hold spaces: the fields after it start past its ")".
        return stat.read().rsplit(")", 1)[1].split()


def _stat_fields(pid: int) -> list[str]:
    return _stat_fields_of(f"/proc/{pid}/stat")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (all its threads) so far."""
    fields = _stat_fields(pid)
    # utime and stime are fields 14 and 15 of stat(5); fields[0] is field 3.
    return (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_seconds(pid: int) -> float:
    """CPU of ``pid``, its live children and its reaped children (cutime, cstime).

    A child that exits moves from "a child's utime" to "the parent's cutime"
    once reaped, so the sum only grows."""
    fields = _stat_fields(pid)
    # stat(5) fields 14-17 (utime, stime, cutime, cstime); fields[0] is field 3.
    total = sum(int(value) for value in fields[11:15])
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == pid:
            continue
        try:
            child = _stat_fields(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
        # fields[1] is field 4, the parent's pid.
        if int(child[1]) == pid:
            total += int(child[11]) + int(child[12])
    return total / _TICK


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy (not idle, not iowait) so far."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(value) for value in stat.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user).
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


def thread_cpu_seconds(pid: int, tid: int) -> float:
    """User + system CPU time of one thread of ``pid`` (its main thread: ``tid == pid``)."""
    fields = _stat_fields_of(f"/proc/{pid}/task/{tid}/stat")
    return (int(fields[11]) + int(fields[12])) / _TICK
