"""The hook socket: a local unix stream socket, mode 0600, that only root (the runtime) may use.

Access control is the file mode (0600, owned by the enforcer's user, root on a
node) plus the kernel's peer credentials (``SO_PEERCRED``): a connection from
any uid other than root or the enforcer's own is answered ``Forbidden`` and
closed.  Each connection carries one request line and gets one answer line;
connections are served on their own threads, so one slow container start never
delays another, and every read has the deadline (``hookDeadline``) as its
timeout, so a client that sends nothing cannot hold a thread.

Start-up refuses (ConfigError) a path held by something that is not a socket,
or by a socket another process still serves (a second enforcer); a stale
socket left by a killed enforcer is replaced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path

from enforcer.errors import ConfigError
from enforcer.hooks.protocol import MAX_REQUEST_BYTES, HookAnswer, HookRequest, HookRequestError, decode_request

log = logging.getLogger(__name__)

Handler = Callable[[HookRequest], HookAnswer]
_UCRED = struct.Struct("3i")


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process on the other end (Linux ``SO_PEERCRED``)."""
    data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _, uid, _ = _UCRED.unpack(data)
    return int(uid)


def read_line(conn: socket.socket, limit: int = MAX_REQUEST_BYTES) -> bytes:
    buffer = b""
    while b"\n" not in buffer:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buffer += chunk
        if len(buffer) > limit:
            raise HookRequestError(f"the request is larger than {limit} bytes")
    return buffer.partition(b"\n")[0]


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False


class HookSocketServer:
    def __init__(self, path: Path, handler: Handler, *, deadline: float, allowed_uids: frozenset[int] | None = None):
        self.path = path
        self._handler = handler
        self._deadline = deadline
        self._allowed = allowed_uids if allowed_uids is not None else frozenset({0, os.geteuid()})
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        _prepare(self.path)
        outer = self

        class _Connection(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer._serve(self.request)

        old_umask = os.umask(0o177)
        try:
            server = _Server(str(self.path), _Connection)
        except OSError as err:
            raise ConfigError(f"hookSocket {self.path}: cannot listen: {err.strerror or err}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="hook-socket")
        self._thread.daemon = True
        self._thread.start()
        log.info("hook socket listening", extra={"socket": str(self.path), "deadline_seconds": self._deadline})

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _answer(self, uid: int, conn: socket.socket) -> HookAnswer:
        try:
            line = read_line(conn)  # read first, so even a refused client gets its answer, not EPIPE
        except HookRequestError as err:
            return HookAnswer.failure(err.reason, err.message)
        if uid not in self._allowed:
            log.warning("hook socket: connection refused", extra={"peer_uid": uid})
            return HookAnswer.failure("Forbidden", f"uid {uid} may not use the hook socket (root only)")
        try:
            request = decode_request(line)
        except HookRequestError as err:
            return HookAnswer.failure(err.reason, err.message)
        return self._handler(request)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(self._deadline)
        try:
            uid = peer_uid(conn)
            answer = self._answer(uid, conn)
            conn.sendall(answer.encode())
        except TimeoutError:
            log.warning("hook socket: client sent no complete request within the deadline")
        except OSError as err:
            log.warning("hook socket: connection failed", extra={"error": str(err)})


def _prepare(path: Path) -> None:
    """Make the directory; clear a stale socket; refuse anything else at ``path``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as err:
        raise ConfigError(f"hookSocket {path}: {err.strerror or err}") from None
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"hookSocket {path} exists and is not a socket; remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)  # stale: nobody serves it
        return
    finally:
        probe.close()
    raise ConfigError(f"hookSocket {path} is served by another process (a second enforcer?)")
