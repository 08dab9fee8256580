"""What the OS does to a benchmark's processes: CPU time, waiting for a CPU, pinning.

A command that takes milliseconds inside Redis may be Redis working or Redis not running at
all: on a machine with as many busy processes as cores, the kernel preempts the server in the
middle of a command and the command's SLOWLOG time includes the wait. These readings tell the
two apart. Linux only (``/proc``); they read what any user may read about their own processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc (no psutil)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def threads(pid: int) -> list[int]:
    """The ids of a process's threads, its main thread first."""
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    return [pid, *(t for t in tids if t != pid)]


def _switches(tid_dir: str) -> tuple[int, int]:
    voluntary = nonvoluntary = 0
    with open(f"{tid_dir}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                nonvoluntary = int(line.split()[1])
    return voluntary, nonvoluntary


def _run_delay_ns(tid_dir: str) -> int:
    # schedstat: time on a CPU, time runnable but waiting for one (run delay), time slices; ns.
    with open(f"{tid_dir}/schedstat") as f:
        return int(f.read().split()[1])


def steal_ms() -> float:
    """Machine-wide time the hypervisor ran something else on this VM's CPUs (all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()  # cpu user nice system idle iowait irq softirq steal
    return int(fields[8]) * 1000 / CLK_TCK


@dataclass(frozen=True)
class SchedReading:
    """A process's scheduling counters at one moment: its main thread apart (the one that
    serves commands in Redis, the event loop in the scheduler), its other threads summed."""

    run_delay_ns: int
    voluntary: int
    nonvoluntary: int
    others_run_delay_ns: int
    others_nonvoluntary: int
    steal_ms: float

    @classmethod
    def of(cls, pid: int) -> SchedReading:
        main, *others = threads(pid)
        voluntary, nonvoluntary = _switches(f"/proc/{pid}/task/{main}")
        others_delay = others_nonvol = 0
        for tid in others:
            try:
                others_delay += _run_delay_ns(f"/proc/{pid}/task/{tid}")
                others_nonvol += _switches(f"/proc/{pid}/task/{tid}")[1]
            except FileNotFoundError:  # the thread ended meanwhile
                continue
        return cls(
            _run_delay_ns(f"/proc/{pid}/task/{main}"),
            voluntary,
            nonvoluntary,
            others_delay,
            others_nonvol,
            steal_ms(),
        )

    def since(self, before: SchedReading) -> dict[str, float]:
        """What happened between two readings, as a benchmark reports it."""
        return {
            "run_delay_ms": round((self.run_delay_ns - before.run_delay_ns) / 1e6, 2),
            "voluntary_switches": self.voluntary - before.voluntary,
            "involuntary_switches": self.nonvoluntary - before.nonvoluntary,
            "other_threads_run_delay_ms": round(
                (self.others_run_delay_ns - before.others_run_delay_ns) / 1e6, 2
            ),
            "other_threads_involuntary_switches": self.others_nonvoluntary
            - before.others_nonvoluntary,
            "steal_ms": round(self.steal_ms - before.steal_ms, 1),
        }


def pin(pid: int, cpus: set[int]) -> None:
    """Restrict every thread of a process to ``cpus`` (threads it starts later inherit it from
    the thread that starts them)."""
    for tid in threads(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def realtime(pid: int, priority: int = 1) -> None:
    """Put every thread of a process in the SCHED_FIFO class: no ordinary (CFS) process
    preempts it any more, it runs until it blocks (the kernel still keeps 5 % of each second
    for the others by default, ``kernel.sched_rt_runtime_us``). Needs root or CAP_SYS_NICE."""
    for tid in threads(pid):
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except PermissionError:
            raise SystemExit(
                "--server-fifo needs root or CAP_SYS_NICE (or a raised RLIMIT_RTPRIO)"
            ) from None


def affinity(pid: int) -> list[int]:
    return sorted(os.sched_getaffinity(pid))
