"""What ``bench/scale.py`` reads of its processes, from Linux ``/proc`` and Redis.

* memory: ``VmRSS`` of a process (``/proc/<pid>/status``), or of its whole tree;
* CPU: ``utime + stime`` (``/proc/<pid>/stat``, every thread), of a process or its tree;
* Redis connections of a process: the server's ``CLIENT LIST`` entries whose client port
  is the local port of one of that process's own TCP sockets (its ``/proc/<pid>/fd``
  socket inodes, found in ``/proc/<pid>/net/tcp`` and ``tcp6``); psutil is not needed;
* where CPU goes: ``py-spy record --format raw --gil --nonblocking`` of each process for
  a window (samples of the thread holding the GIL), summed by leaf function (self time);
  without py-spy, ``cProfile`` of the caller only.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import re
import signal
import subprocess
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PY_SPY = Path(sys.executable).with_name("py-spy")
STDLIB = sysconfig.get_paths()["stdlib"]


# -- processes ----------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{thread}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except OSError:
        pass
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        if current in found:
            continue
        found.append(current)
        stack.extend(children(current))
    return found


def rss(pid: int) -> int:
    """``VmRSS`` of one live process in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory(pid: int, *, whole_tree: bool) -> int:
    return sum(rss(each) for each in tree(pid)) if whole_tree else rss(pid)


def cpu(pid: int) -> float:
    """utime + stime of one live process (all its threads), in seconds (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_cpu(pid: int) -> float:
    return sum(cpu(each) for each in tree(pid))


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


# -- sockets and Redis clients --------------------------------------------------------------

_SOCKET = re.compile(r"socket:\[(\d+)\]")


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` has open."""
    found: set[int] = set()
    fd_dir = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                match = _SOCKET.fullmatch(os.readlink(f"{fd_dir}/{fd}"))
                if match:
                    found.add(int(match.group(1)))
    return found


def tcp_local_ports(pid: int, remote_port: int) -> set[int]:
    """Local ports of process ``pid``'s TCP sockets connected to ``remote_port``."""
    inodes = socket_inodes(pid)
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as handle:
            next(handle)  # header
            for line in handle:
                fields = line.split()
                if len(fields) < 10 or int(fields[9]) not in inodes:
                    continue
                local, remote = fields[1], fields[2]
                if int(remote.rsplit(":", 1)[1], 16) == remote_port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def redis_clients_of(
    client: Redis, pids: Mapping[str, int], redis_port: int, *, exclude: Iterable[str] = ()
) -> dict[str, int]:
    """How many ``CLIENT LIST`` entries belong to each process of ``pids`` (by label),
    matched by the client side's port; connections named (``CLIENT SETNAME``) in
    ``exclude`` do not count (the bench's own: its sampler, the model's bookkeeping)."""
    ports = {label: tcp_local_ports(pid, redis_port) for label, pid in pids.items()}
    skip = set(exclude)
    counts = dict.fromkeys(pids, 0)
    for entry in await client.client_list():
        if str(entry.get("name", "")) in skip:
            continue
        address = str(entry.get("addr", ""))
        port = int(address.rsplit(":", 1)[1]) if ":" in address else -1
        for label, owned in ports.items():
            if port in owned:
                counts[label] += 1
    return counts


# -- where CPU goes -------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessProfile:
    label: str
    samples: int  # samples of the process's threads on a Python function
    top: tuple[tuple[str, int], ...]  # (function, self samples), most first, waits left out
    waiting: int = 0  # samples whose leaf waits (select, poll, a lock): not CPU
    note: str = ""
    packages: tuple[tuple[str, int], ...] = ()  # self samples by the leaf's package


WAITING = re.compile(
    r"^(?:\S+\.)?(?:select|poll|_poll|wait|acquire|sleep|_worker|accept)"
    r"(?:\s|$)"
)
"""Leaf functions that block the thread (a selector's ``select``, ``Condition.wait``, ...):
``--nonblocking`` cannot tell idle threads, so they are counted apart (with ``--gil`` few
samples land there: a blocking call releases the GIL)."""


_FRAME = re.compile(r"^(?P<name>.*) \((?P<path>.*?)(?::\d+)?\)$")


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{ROOT}/", f"{STDLIB}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _function(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{match.group('name')} ({_short(match.group('path'))})"


def package(function: str) -> str:
    """``asyncio``, ``redis``, ``harness``... of ``name (path)`` as :func:`_function` names it."""
    path = function.rsplit("(", 1)[-1].rstrip(")")
    head = path.split("/", 1)[0]
    return head.removesuffix(".py") if head else "?"


def self_time(raw: str, limit: int = 15) -> tuple[int, int, tuple[tuple[str, int], ...]]:
    """Samples, waiting samples and the top ``limit`` other leaf functions of py-spy's
    raw (collapsed) output. A stack with no Python frame (``process <pid>:...`` or a
    thread only) is left out."""
    total, waiting, counts = _leaves(raw)
    return total, waiting, tuple(counts.most_common(limit))


def by_package(raw: str) -> tuple[tuple[str, int], ...]:
    """The non-waiting samples of py-spy's raw output by the leaf function's package."""
    packages: Counter[str] = Counter()
    for function, count in _leaves(raw)[2].items():
        packages[package(function)] += count
    return tuple(packages.most_common())


def _leaves(raw: str) -> tuple[int, int, Counter[str]]:
    counts: Counter[str] = Counter()
    total = waiting = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.split(";")[-1]
        if leaf.startswith(("process ", "thread ")):
            continue
        total += int(count)
        function = _function(leaf)
        if WAITING.match(function):
            waiting += int(count)
        else:
            counts[function] += int(count)
    return total, waiting, counts


class Profiler:
    """``py-spy record --gil --nonblocking`` of each target process for a window: samples
    of the thread holding the GIL, i.e. where the process's Python CPU goes (waiting
    threads do not hold it). The targets named in ``subprocesses`` are followed into their
    children (prefork pool children); the caller must not be (the workers and Redis are
    its children). Without py-spy, ``cProfile`` of this (the caller) process only, which
    is said in the result."""

    def __init__(
        self, targets: Mapping[str, int], out_dir: Path, *, subprocesses: Iterable[str] = ()
    ) -> None:
        self.targets = dict(targets)
        self.out_dir = out_dir
        self.subprocesses = set(subprocesses)
        self.available = PY_SPY.is_file()
        self._spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self._cprofile: cProfile.Profile | None = None

    @property
    def pids(self) -> list[int]:
        """The profilers' own processes (their CPU is not the measured processes')."""
        return [process.pid for process, _ in self._spies.values()]

    def start(self) -> None:
        if not self.available:
            self._cprofile = cProfile.Profile()
            self._cprofile.enable()
            return
        for label, pid in self.targets.items():
            output = self.out_dir / f"py-spy-{label}.txt"
            command = [
                str(PY_SPY), "record", "--format", "raw", "--nonblocking", "--gil",
                "--full-filenames", "--rate", "100", "--pid", str(pid), "--output", str(output),
            ]  # fmt: skip
            if label in self.subprocesses:
                command.append("--subprocesses")
            log = (self.out_dir / f"py-spy-{label}.log").open("wb")
            self._spies[label] = (
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT),
                output,
            )
            log.close()

    def stop(self) -> list[ProcessProfile]:
        if self._cprofile is not None:
            self._cprofile.disable()
            return [self._caller_profile(self._cprofile)]
        found: list[ProcessProfile] = []
        for process, _ in self._spies.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
        for label, (process, output) in self._spies.items():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            try:
                raw = output.read_text()
                samples, waiting, top = self_time(raw)
                found.append(ProcessProfile(label, samples, top, waiting, packages=by_package(raw)))
            except OSError as error:
                found.append(ProcessProfile(label, 0, (), note=f"no py-spy output: {error}"))
        self._spies.clear()
        return found

    @staticmethod
    def _caller_profile(profile: cProfile.Profile) -> ProcessProfile:
        stats = pstats.Stats(profile, stream=io.StringIO())
        rows: list[tuple[str, int]] = []
        raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
        raw = stats.stats  # type: ignore[attr-defined]
        ordered = sorted(raw.items(), key=lambda item: item[1][2], reverse=True)
        for (path, line, name), (_, _, tottime, _, _) in ordered[:15]:
            rows.append((f"{name} ({_short(path)}:{line})", round(tottime * 1000)))
        return ProcessProfile(
            "caller",
            round(sum(value[2] for value in raw.values()) * 1000),
            tuple(rows),
            note="py-spy is not installed: cProfile of the caller only, in ms of self time; "
            "the workers are not profiled",
        )


def describe_profiles(profiles: Sequence[ProcessProfile]) -> list[str]:
    """Each process's top functions, as shares of its samples that were not waiting."""
    lines: list[str] = []
    for profile in profiles:
        if profile.note.startswith("py-spy is not"):
            head = f"  {profile.label}: {profile.samples} ms of self time; {profile.note}"
        else:
            head = (
                f"  {profile.label}: {profile.samples} samples, of which {profile.waiting} "
                f"waiting (select, poll, lock and condition waits; left out below) {profile.note}"
            )
        lines.append(head.rstrip())
        busy = profile.samples - profile.waiting
        if profile.packages and busy > 0:
            shares = ", ".join(
                f"{name} {count / busy * 100:.0f} %" for name, count in profile.packages[:10]
            )
            lines.append(f"    by package of the leaf: {shares}")
        for name, count in profile.top:
            share = count / busy * 100 if busy > 0 else 0.0
            lines.append(f"    {share:5.1f} %  {count:7d}  {name}")
    return lines
