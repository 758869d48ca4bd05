"""The system under test: two reach workers on one database, as the nemesis sees them.

``Worker`` is the e2e tests' ``ReachProcess`` plus what the nemesis needs: SIGSTOP and
SIGCONT, and a clock that may run off (libfaketime preloaded, as the ``faketime`` command
does; the time stamps of the process's own log are checked to show the skew took).
``Cluster`` keeps two worker slots; a slot restarted gets a new process with a new worker
id, as an operator's restart would, and keeps its skew. The database is a SQLite file or
a private PostgreSQL server that can be restarted under the workers' feet.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import glob
import json
import signal
import threading
import time
from pathlib import Path

from reachstore.reach.v1 import reach_service_pb2_grpc as pb_grpc
from tests.e2e.private_postgres import PrivatePostgres
from tests.e2e.test_reach_crash import ReachProcess

# What the ``faketime`` command preloads (ld.so expands $LIB). The worker gets it directly
# rather than through that command, which stays the parent of the program it runs and
# passes no signal on: SIGKILL and SIGSTOP would hit it instead of the worker.
LIBFAKETIME = "/usr/$LIB/faketime/libfaketimeMT.so.1"


class HarnessError(RuntimeError):
    """The checker could not set up a fault it meant to inject: no verdict on reach."""


def _require_libfaketime() -> None:
    if not glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob(
        "/usr/lib*/faketime/libfaketimeMT.so.1"
    ):
        raise HarnessError("libfaketime is not installed (`make faults-install` installs it)")


class Worker(ReachProcess):
    """A reach process whose wall clock runs ``skew_s`` seconds off (0: the real one)."""

    def __init__(
        self, workdir: Path, database_url: str, config: Path, worker_id: str, skew_s: float = 0.0
    ) -> None:
        super().__init__(workdir, database_url, config, worker_id)
        self.skew_s = skew_s
        self.measured_skew: tuple[float, float] | None = None  # (low, high), seconds
        if skew_s:
            _require_libfaketime()
            # Only the wall clock moves: leases and retry times are read from it, while
            # the event loop's timers keep running on the real monotonic clock.
            self._env.update(
                LD_PRELOAD=LIBFAKETIME,
                FAKETIME=f"{skew_s:+g}s",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
            )

    def start(self, timeout: float = 60.0) -> Worker:
        spawned = time.time()
        super().start(timeout)
        ready = time.time()
        if self.skew_s:
            stamp = self._last_log_stamp()
            # The line was written between spawning and the health check's answer, so
            # the process's offset lies between these two.
            low, high = stamp - ready - 0.5, stamp - spawned + 0.5
            if not low <= self.skew_s <= high:
                raise HarnessError(
                    f"{self.worker_id} was meant to run {self.skew_s:+g} s off, but its log "
                    f"reads {low:+.1f} to {high:+.1f} s off"
                )
            self.measured_skew = (low, high)
        return self

    def _last_log_stamp(self) -> float:
        """The time stamp (epoch seconds, by the process's own clock) of the last line of
        its log."""
        stamps = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
                at = dt.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
            except (ValueError, KeyError, TypeError):
                continue
            stamps.append(at.replace(tzinfo=dt.UTC).timestamp())
        if not stamps:
            raise HarnessError(f"{self.worker_id} wrote no time-stamped log line")
        return stamps[-1]

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)


class SqliteDatabase:
    """A SQLite file both workers open. It cannot be restarted: there is no server, each
    process has the library in itself (its analogue of an outage is a lock, which two
    workers writing at once produce anyway)."""

    name = "sqlite"
    restartable = False

    def __init__(self, workdir: Path) -> None:
        self.url = f"sqlite:///{workdir / 'reach.db'}"

    def restart(self, down_s: float) -> None:
        raise HarnessError("a SQLite database has no server to restart")

    def close(self) -> None:
        pass


class PostgresDatabase:
    """A PostgreSQL server of the checker's own, stopped and started as a fault."""

    name = "postgresql"
    restartable = True

    def __init__(self) -> None:
        self.server = PrivatePostgres().init()
        self.url = self.server.create_database("reachstore")

    def restart(self, down_s: float) -> None:
        """Stops the server the hard way (connections dropped, like a crash), waits, and
        starts it again."""
        self.server.stop("immediate")
        time.sleep(down_s)
        self.server.start()

    def close(self) -> None:
        self.server.destroy()


Database = SqliteDatabase | PostgresDatabase


@dataclasses.dataclass
class Slot:
    index: int
    worker: Worker
    generation: int = 0
    skew_s: float = 0.0
    busy: bool = False  # paused or restarting: no submissions go to it


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of this machine's TCP socket from ``local_port`` to ``remote_port``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
            if int(local, 16) == local_port and int(remote, 16) == remote_port:
                return fields[9]
    return None


class Cluster:
    def __init__(self, workdir: Path, database: Database, config: Path, size: int = 2) -> None:
        self._workdir = workdir
        self._database = database
        self._config = config
        self._lock = threading.Lock()
        self.slots = [Slot(i, self._worker(i, 0, 0.0)) for i in range(size)]
        self.started: list[Worker] = []  # every process ever started, for their logs

    def _worker(self, index: int, generation: int, skew_s: float) -> Worker:
        name = f"w{index}-g{generation}" + (f"-skew{skew_s:+g}s" if skew_s else "")
        return Worker(self._workdir, self._database.url, self._config, name, skew_s)

    def start(self) -> Cluster:
        for slot in self.slots:
            self.started.append(slot.worker)
            slot.worker.start()
        return self

    def sender_of(self, client_port: int, server_port: int) -> str:
        """The worker id of the process that holds the client end of a connection to a
        receiver ("" when none is found), from /proc: the receivers use it to log who sent
        each request, so that a fault excuses only what it did to its own victim."""
        inode = _socket_inode(client_port, server_port)
        if inode is None:
            return ""
        target = f"socket:[{inode}]"
        for worker in reversed(list(self.started)):
            if worker.process is None or worker.process.poll() is not None:
                continue
            folder = Path(f"/proc/{worker.process.pid}/fd")
            try:
                fds = list(folder.iterdir())
            except OSError:
                continue
            for fd in fds:
                try:
                    if fd.readlink().as_posix() == target:
                        return worker.worker_id
                except OSError:
                    continue
        return ""

    def available(self) -> list[Worker]:
        """Workers that should answer now (not paused, not restarting)."""
        with self._lock:
            return [slot.worker for slot in self.slots if not slot.busy]

    def stub(self) -> pb_grpc.ReachServiceStub:
        workers = self.available()
        if not workers:
            raise HarnessError("no reach worker is available")
        return workers[0].stub

    def _set_busy(self, slot: Slot, busy: bool) -> None:
        with self._lock:
            slot.busy = busy

    def kill(self, index: int) -> str:
        """SIGKILL; the slot stays down until ``restart``."""
        slot = self.slots[index]
        self._set_busy(slot, True)
        slot.worker.resume()  # a paused process dies just the same, but let it be seen to
        slot.worker.kill()
        return slot.worker.worker_id

    def restart(self, index: int, skew_s: float | None = None) -> Worker:
        """Starts the slot's next process (after ``kill``), with a new skew if given."""
        slot = self.slots[index]
        if skew_s is not None:
            slot.skew_s = skew_s
        slot.generation += 1
        worker = self._worker(index, slot.generation, slot.skew_s)
        self.started.append(worker)
        worker.start()
        with self._lock:
            slot.worker, slot.busy = worker, False
        return worker

    def pause(self, index: int) -> str:
        slot = self.slots[index]
        self._set_busy(slot, True)
        slot.worker.pause()
        return slot.worker.worker_id

    def resume(self, index: int) -> None:
        slot = self.slots[index]
        slot.worker.resume()
        self._set_busy(slot, False)

    def stop(self) -> dict[str, int | None]:
        """Stops every worker (SIGTERM); their exit codes."""
        codes: dict[str, int | None] = {}
        for slot in self.slots:
            slot.worker.resume()
            codes[slot.worker.worker_id] = slot.worker.stop()
        return codes

    def kill_all(self) -> None:
        """Ends every process this cluster started that still runs (cleanup after an error)."""
        for worker in self.started:
            if worker.process is not None and worker.process.poll() is None:
                worker.resume()
                worker.process.kill()
                worker.process.wait(10)
