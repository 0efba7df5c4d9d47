"""Keeps the replicas current: polls every known enforcer's ``GET /replica`` with ``If-None-Match``.

One round every ``poll_interval`` seconds over every node the directory names or the scheduler has
asked about, on a few worker threads (an unreachable enforcer costs its timeout, not a round).  An
unchanged node answers ``304`` (the replica is confirmed fresh, nothing is decoded); a changed one
sends its export, which :meth:`ReplicaStore.update` decodes into a new engine.  A failed poll is
recorded (the replica ages; the node counts as down once it is no longer fresh) and logged once per
outage, not once per round.  A node the scheduler names for the first time is polled at once
(:meth:`Poller.request`), so the first answers about it need not wait for a round.

Reads need a client certificate signed by the enforcers' CA, or their read-only bearer token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor

import httpx

from extender import engine_adapter
from extender.directory import EnforcerDirectory
from extender.replica import ReplicaStore

log = logging.getLogger(__name__)
REPLICA_PATH = "/replica"


class Poller:
    def __init__(
        self,
        store: ReplicaStore,
        directory: EnforcerDirectory,
        client: httpx.Client,
        *,
        interval: float,
        workers: int = 4,
        server_name: str | None = None,
        discover: Callable[[], None] | None = None,
        discover_every: float = 10.0,
    ) -> None:
        self.store = store
        self.directory = directory
        self.client = client
        self.interval = interval
        self._extensions = {"sni_hostname": server_name} if server_name else None
        self._discover = discover
        self._discover_every = discover_every
        self._discovered_at: float | None = None
        self._nodes: set[str] = set(directory.listed())
        self._nodes_lock = threading.Lock()
        self._failing: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="extender-poll")
        self._stop = threading.Event()
        self._first_round = threading.Event()  # every known node polled once: answers are worth giving
        self._thread: threading.Thread | None = None

    def request(self, node: str) -> None:
        """Start polling ``node`` (the scheduler named it) and poll it now."""
        with self._nodes_lock:
            if node in self._nodes:
                return
            self._nodes.add(node)
        if not self._stop.is_set():
            self._pool.submit(self.refresh, node)

    def refresh(self, node: str) -> None:
        """One poll of one node (also called directly by tests and the burst simulation)."""
        url = self.directory.url_for(node)
        if url is None:
            return
        headers = {}
        etag = self.store.etag(node)
        if etag is not None:
            headers["If-None-Match"] = etag
        try:
            response = self.client.get(url + REPLICA_PATH, headers=headers, extensions=self._extensions)
            if response.status_code == 304:
                self.store.confirm(node)
            elif response.status_code == 200:
                self.store.update(node, response.json(), etag=response.headers.get("ETag"))
            else:
                raise _PollError(f"GET {REPLICA_PATH} answered {response.status_code}: {response.text[:200]}")
        except (httpx.HTTPError, ValueError, _PollError, engine_adapter.SnapshotError) as err:
            message = getattr(err, "message", None) or f"{type(err).__name__}: {err}"
            self.store.failed(node, message)
            if node not in self._failing:
                self._failing.add(node)
                log.warning("enforcer replica poll failed", extra={"node": node, "url": url, "error": message})
            return
        if node in self._failing:
            self._failing.discard(node)
            log.info("enforcer replica poll recovered", extra={"node": node})

    def poll_all(self) -> None:
        """One round over every known node, waiting for it to finish."""
        with self._nodes_lock:
            nodes = sorted(self._nodes)
        for future in [self._pool.submit(self.refresh, n) for n in nodes]:
            future.result()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="extender-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._maybe_discover()
            self.poll_all()
            self._first_round.set()
            self._stop.wait(self.interval)

    @property
    def ready(self) -> bool:
        """Whether the first round of polls is done (``/readyz``)."""
        return self._first_round.is_set()

    def _maybe_discover(self) -> None:
        """Refresh the pod directory (daemonset discovery) every ``discover_every`` seconds."""
        if self._discover is None:
            return
        now = time.monotonic()
        if self._discovered_at is not None and now - self._discovered_at < self._discover_every:
            return
        self._discovered_at = now
        try:
            self._discover()
        except Exception as err:  # the API being down must not stop the polls of known enforcers
            log.warning("enforcer discovery failed", extra={"error": f"{type(err).__name__}: {err}"})
            return
        with self._nodes_lock:
            self._nodes.update(self.directory.listed())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()


class _PollError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def client_factory(
    *,
    ca: str | None,
    cert: str | None,
    key: str | None,
    token: Callable[[], str | None] | None,
    timeout: float,
) -> httpx.Client:
    """The HTTPS client the poller reads the enforcers with (keep-alive: one TLS handshake per enforcer)."""
    from servicekit import tls

    verify = tls.client_context(ca, cert=cert, key=key) if ca is not None else True
    auth = None
    if token is not None and cert is None:
        auth = _BearerFromFile(token)
    return httpx.Client(verify=verify, timeout=timeout, auth=auth)


class _BearerFromFile(httpx.Auth):
    """The token read at every request (a rotated token file needs no restart)."""

    def __init__(self, token: Callable[[], str | None]) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        value = self._token()
        if value:
            request.headers["Authorization"] = f"Bearer {value}"
        yield request
