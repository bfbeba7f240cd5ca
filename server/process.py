"""``nextpara serve`` as a child process: start it, wait until it serves, stop it. The one way the
benchmarks (bench/) and the tests start a real server process.

    from nextpara.server.process import ServerProcess

    with ServerProcess.local(data_dir, "--grace-seconds", "1") as server:   # 127.0.0.1, free ports
        Client(server.address).info()
    server.returncode, server.log                                           # 0 after SIGTERM; what it logged

    server = ServerProcess(["--data-dir", DIR, "--address", "127.0.0.1:0"], env={"NEXTPARA_WORKERS": "2"}).start()
    ...
    server.stop()                                                           # SIGTERM, SIGKILL after the grace

The child is ``python -m nextpara serve ARGS`` with the caller's environment (plus ``env``). It is ready
when it logs ``SERVING on HOST:PORT`` (after loading the store and the model), which also says the port
it bound, so ``--address HOST:0`` works; a store without a model logs ``NOT_SERVING (no model) on
HOST:PORT`` instead, which is accepted with ``require_model=False`` (such a server still takes writes).
The child's stdout and stderr are read into one log (the last ``log_lines`` lines are kept) by a thread
for its whole life, so the pipe never fills. If the child exits or has not served within
``start_timeout`` seconds, ``start`` stops it and raises ServerStartError with the end of its log.

Standard library only: it runs in the benchmark and test processes before anything heavy is imported.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

# the line run_server logs once the store and the model are loaded (server/main.py)
READY = re.compile(r"(?<![\w])(SERVING|NOT_SERVING \(no model\)) on (\S+):(\d+)\b")
WILDCARD_HOSTS = {"", "0.0.0.0", "[::]", "::"}


class ServerStartError(RuntimeError):
    """The server process exited, or did not serve in time; the message ends with its log."""


class ServerProcess:
    """One ``nextpara serve`` process. ``start()`` returns once it serves; ``stop()`` ends it."""

    def __init__(self, args: Sequence[str] = (), *, env: Mapping[str, str] | None = None, require_model: bool = True,
                 start_timeout: float = 120.0, stop_timeout: float = 60.0, log_lines: int = 10_000,
                 python: str = sys.executable):
        self.args = [str(a) for a in args]
        self.env = dict(env or {})
        self.require_model = require_model
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.host: str | None = None  # as the server logged it
        self.port: int | None = None  # the port it bound (also when asked for port 0)
        self.serving = False  # True: SERVING with a model; False: not started, or NOT_SERVING (no model)
        self._lines: collections.deque[str] = collections.deque(maxlen=log_lines)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @classmethod
    def local(cls, data_dir: str | os.PathLike, *extra: str, metrics: bool = True, **kwargs) -> ServerProcess:
        """A server (not started yet) for ``data_dir`` on a free port of 127.0.0.1, its metrics endpoint
        on another (or off with ``metrics=False``); ``extra`` are further ``serve`` options."""
        return cls(["--data-dir", str(data_dir), "--address", "127.0.0.1:0",
                    "--metrics-address", "127.0.0.1:0" if metrics else "", *extra], **kwargs)

    @property
    def address(self) -> str:
        """HOST:PORT for a client on this machine (127.0.0.1 when the server listens on every interface)."""
        if self.port is None:
            raise RuntimeError("the server has not started")
        host = "127.0.0.1" if self.host in WILDCARD_HOSTS else self.host
        return f"{host}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process().pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log(self) -> str:
        """What the server wrote to stdout and stderr so far (its last ``log_lines`` lines)."""
        return "".join(list(self._lines))

    def wait_for(self, text: str, timeout: float) -> bool:
        """Wait until a line of the log holds ``text`` (within the last ``log_lines`` lines); False after ``timeout``
        seconds or once the process has ended without writing it."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(self._lines)):
            if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                return any(text in line for line in list(self._lines))
            time.sleep(0.05)
        return True

    def tail(self, lines: int = 40) -> str:
        return "".join(list(self._lines)[-lines:])

    def poll(self) -> int | None:
        return self._process().poll()

    def send_signal(self, sig: int) -> None:
        self._process().send_signal(sig)

    def start(self) -> ServerProcess:
        """Spawn the server and wait for its SERVING line; returns self."""
        if self.proc is not None:
            raise RuntimeError("this ServerProcess was started already")
        self.proc = subprocess.Popen([self.python, "-m", "nextpara", "serve", *self.args], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env})
        self._reader = threading.Thread(target=self._read, name=f"nextpara-serve-{self.proc.pid}-log", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if not self._reader.is_alive() and not self._ready.is_set():  # its output closed: the process has ended (or is ending)
                code = self._wait(10)
                raise ServerStartError(f"nextpara serve {' '.join(self.args)} exited with code {code} before serving; "
                                       f"its log ends:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ServerStartError(f"nextpara serve {' '.join(self.args)} did not serve within "
                                       f"{self.start_timeout:g} s (killed); its log ends:\n{self.tail()}")
        if self.require_model and not self.serving:
            self.stop()
            raise ServerStartError(f"nextpara serve {' '.join(self.args)} came up without a model (NOT_SERVING); "
                                   f"pass require_model=False to accept that; its log ends:\n{self.tail()}")
        return self

    def stop(self, timeout: float | None = None) -> int:
        """SIGTERM (a graceful shutdown), then SIGKILL if it has not exited within ``timeout`` seconds
        (``stop_timeout`` by default); returns the exit code. Once the process is gone, ``log`` is complete."""
        proc = self._process()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        return self._wait(60)

    def kill(self) -> int:
        """SIGKILL now (no shutdown at all); returns the exit code."""
        proc = self._process()
        if proc.poll() is None:
            proc.kill()
        return self._wait(60)

    def __enter__(self) -> ServerProcess:
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.stop()

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else f"pid {self.proc.pid}, " + (
            f"exit code {self.proc.returncode}" if self.proc.poll() is not None else
            f"on {self.address}" if self.port is not None else "starting")
        return f"<ServerProcess {state}>"

    def _process(self) -> subprocess.Popen:
        if self.proc is None:
            raise RuntimeError("the server has not started")
        return self.proc

    def _wait(self, timeout: float) -> int:
        code = self._process().wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout=10)  # the rest of the log
        return code

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._lines.append(line)
                if not self._ready.is_set() and (m := READY.search(line)):
                    self.serving = m.group(1) == "SERVING"
                    self.host, self.port = m.group(2), int(m.group(3))
                    self._ready.set()

