"""`callboard serve --workers N`: N worker processes, each listening on its own socket bound to the same
port with SO_REUSEPORT, so the kernel spreads incoming connections over the workers.

Why not uvicorn's own supervisor: it hands every worker one shared listening socket, and whichever worker
wakes first accepts every connection that is waiting. Connections that open together (a proxy's keep-alive
pool, a load generator) all land on one worker while the others idle: measured with `make bench`, one of
two workers served all 32 connections in half of the runs (docs/decisions.md). With a socket per worker the
kernel chooses the worker for each connection by hashing its addresses.

The supervisor keeps the sockets for its whole life: a worker that dies is replaced on the dead one's
socket, so connections the kernel queued on it meanwhile are served by the replacement, not dropped. A
worker that exits with an error before it ever served (the app, the settings or the database are broken)
would fail the same way again, so the supervisor stops everything and exits with 3, uvicorn's code for a
failed start. SIGTERM or SIGINT: every worker is asked to stop (each finishes its
requests in flight, then its lifespan), and the supervisor exits once they have.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any

import uvicorn

log = logging.getLogger("callboard.supervisor")
STARTUP_FAILURE = 3  # uvicorn's exit code for a server that could not start
_spawn = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no state copied by fork


def available() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) that other SO_REUSEPORT sockets may share; not listening yet (the
    worker that owns it listens)."""
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _free(host: str, port: int) -> int:
    """The port, once a plain bind proves nobody holds it: SO_REUSEPORT alone would let a second server
    started by mistake on the same port share its connections silently. OSError when it is taken."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return int(probe.getsockname()[1])


def _work(config: uvicorn.Config, sock: socket.socket, started: Event) -> None:
    """A worker process: one uvicorn server on its own socket; `started` is set once it serves."""
    config.configure_logging()  # the config was built in the supervisor; its logging setup does not travel
    server = uvicorn.Server(config)

    def watch() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.started:
            started.set()

    threading.Thread(target=watch, name="startup-watch", daemon=True).start()
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


class Supervisor:
    def __init__(self, config: uvicorn.Config, workers: int) -> None:
        self.config = config
        port = _free(config.host, config.port)  # port 0: every socket on the port this one was given
        self.sockets = [bind(config.host, port) for _ in range(workers)]
        self.processes: list[BaseProcess | None] = [None] * workers
        self.started: list[Event | None] = [None] * workers
        self.stopping = threading.Event()

    def _start(self, slot: int) -> None:
        started = _spawn.Event()
        process = _spawn.Process(
            target=_work, args=(self.config, self.sockets[slot], started), name=f"worker-{slot}"
        )
        process.start()
        self.processes[slot], self.started[slot] = process, started
        log.info("worker %d started [%s]", slot, process.pid)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("received %s: stopping the workers", signal.Signals(signum).name)
        self.stopping.set()

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT (0), or until a worker cannot start (3)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        host, port = self.sockets[0].getsockname()[:2]
        log.info(
            "serving on http://%s:%s with %d workers [supervisor %s]",
            host,
            port,
            len(self.sockets),
            os.getpid(),
        )
        code = 0
        for slot in range(len(self.sockets)):
            self._start(slot)
        while not self.stopping.wait(0.5):
            for slot, process in enumerate(self.processes):
                if process is None or process.is_alive():
                    continue
                process.join()
                _forget_metrics_of(process.pid)
                started = self.started[slot]
                if (process.exitcode or 0) > 0 and (started is None or not started.is_set()):
                    # It gave up before it ever served: the app, the settings or the database are broken,
                    # and a new worker would fail the same way (uvicorn's supervisor restarts it forever).
                    # Killed by a signal (the OOM killer, an operator) it is replaced like any dead worker.
                    log.error(
                        "worker %d [%s] could not start (exit code %s); stopping",
                        slot,
                        process.pid,
                        process.exitcode,
                    )
                    code = STARTUP_FAILURE
                    self.stopping.set()
                    break
                log.warning(
                    "worker %d [%s] died (exit code %s); starting another",
                    slot,
                    process.pid,
                    process.exitcode,
                )
                self._start(slot)
        self._stop_all()
        return code

    def _stop_all(self) -> None:
        live = [p for p in self.processes if p is not None and p.is_alive()]
        for process in live:
            if process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        # Each worker waits at most its graceful timeout for requests in flight, then runs its lifespan's end.
        grace = (self.config.timeout_graceful_shutdown or 30) + 15
        for process in live:
            process.join(grace)
            if process.is_alive():
                log.error("worker [%s] did not stop within %ss; killing it", process.pid, grace)
                process.kill()
                process.join()
            _forget_metrics_of(process.pid)
        for sock in self.sockets:
            sock.close()


def _forget_metrics_of(pid: int | None) -> None:
    """A dead worker's live gauges (pool use) must stop counting in /metrics."""
    from callboard_core.metrics import MULTIPROC_ENV

    if pid is not None and os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
