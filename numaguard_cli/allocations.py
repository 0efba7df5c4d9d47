"""``numaguard allocations``: ask one node's enforcer what it allocated and what is still free.

Reads ``GET /allocations`` and ``GET /topology`` (the read API: a client
certificate signed by the enforcer's CA, or the bearer token) and prints them
through :mod:`numaguard_cli.allocations_view`.  ``--watch`` polls every
``--interval`` seconds and redraws only when the answer changed; Ctrl-C ends
it with exit 0, ``--count`` bounds it.

Every failure to get an answer is a :class:`QueryError` with a message that
says what to do (exit 1): unreachable, TLS refused either way, 401 (no
credentials), 403 (credentials refused), an answer that is not the contract.
httpx and ssl exceptions never reach the user.  In watch mode an unreachable
enforcer or a 5xx answer is shown in place of the table and polled again; an
authentication or TLS failure ends the watch, since repeating cannot fix it
(except a connection closed without an answer: under TLS 1.3 that is both
how a refused client certificate shows and what an enforcer restart looks
like, so it is polled again with a message naming both).

This module does the I/O and the loop; it must not format tables (the view does).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import ssl
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from numaguard_cli import allocations_view as view
from servicekit import tls
from shared import contract

HELP = "show what a node's enforcer allocated (pods, containers, CPUs, NUMA nodes) and what is still free"
DEFAULT_INTERVAL = 2.0
REQUEST_TIMEOUT = 10.0
# Terminal control for a redraw: cursor home, clear screen (as watch(1) does).
CLEAR_SCREEN = "\x1b[H\x1b[2J"
EXIT_FAILED = 1
EXIT_USAGE = 2

_Model = TypeVar("_Model", bound=BaseModel)


class QueryError(Exception):
    """The enforcer could not be asked, or did not answer usefully; ``message`` is for the operator."""

    reason = "QueryFailed"
    # worth polling again in --watch (the enforcer may come back); authentication and TLS problems are not
    transient = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CredentialsError(QueryError):
    """The CA, client certificate, key or token file given on the command line cannot be used."""

    reason = "BadCredentials"


class EnforcerUnreachable(QueryError):
    """No connection, or no answer in time."""

    reason = "Unreachable"
    transient = True


class TLSFailure(QueryError):
    """The handshake failed: the enforcer's certificate is not trusted, or our client certificate was refused."""

    reason = "TLSFailure"


class Unauthenticated(QueryError):
    """HTTP 401: the request carried no credentials the enforcer recognises as such."""

    reason = "Unauthorized"


class Forbidden(QueryError):
    """HTTP 403: the credentials were presented and refused (wrong token, wrong scheme)."""

    reason = "Forbidden"


class UnexpectedAnswer(QueryError):
    """Any other non-2xx status, or a body that is not the contract's model."""

    reason = "UnexpectedAnswer"

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--enforcer", required=True, metavar="URL", help="the node's enforcer, https://HOST:PORT")
    parser.add_argument(
        "--ca", type=Path, metavar="FILE", help="CA of the enforcer's serving certificate (default: system CAs)"
    )
    credentials = parser.add_mutually_exclusive_group()
    credentials.add_argument("--token-file", type=Path, metavar="FILE", help="file holding the read API's bearer token")
    credentials.add_argument("--cert", type=Path, metavar="FILE", help="client certificate signed by the enforcer's CA")
    parser.add_argument("--key", type=Path, metavar="FILE", help="private key of --cert (default: inside --cert)")
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="name to verify the enforcer's certificate against, when URL is an address it does not name",
    )
    parser.add_argument("-n", "--namespace", help="only pods of this namespace")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml"),
        default="table",
        help="table (default), wide (plus QoS, pod NUMA affinity, pod shared pool, UID), json or yaml "
        "(both: the enforcer's answers as served)",
    )
    parser.add_argument(
        "--watch", action="store_true", help="poll and redraw whenever the answer changes (Ctrl-C ends)"
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=DEFAULT_INTERVAL,
        metavar="S",
        help=f"seconds between polls with --watch (default {DEFAULT_INTERVAL:g})",
    )
    parser.add_argument("--count", type=_positive_int, metavar="N", help="with --watch: stop after N polls")


# -- talking to the enforcer ---------------------------------------------------------------


def _ssl_error_in(error: BaseException) -> ssl.SSLError | None:
    """The ssl error that caused an httpx error, however deeply httpx/httpcore wrapped it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _tls_message(url: str, error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = error.verify_message or str(error)
        if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
            hint = "the certificate does not name this host: pass the name it carries with --tls-server-name"
        else:
            hint = "pass the CA that signed the enforcer's certificate with --ca"
        return f"TLS with {url} failed, the enforcer's certificate is not trusted ({detail}): {hint}"
    reason = error.reason or str(error)
    if reason == "WRONG_VERSION_NUMBER":
        return f"TLS with {url} failed ({reason}): the server does not speak TLS there (an http:// address?)"
    if ("ALERT" in reason and "CERTIFICATE" in reason) or reason.endswith("ALERT_UNKNOWN_CA"):
        return (
            f"TLS with {url} failed ({reason}): the enforcer refused the client certificate; "
            "it must be signed by the enforcer's CA and in date"
        )
    return f"TLS with {url} failed ({reason})"


def _connection_error(url: str, error: httpx.HTTPError, *, presented_certificate: bool) -> QueryError:
    cause = _ssl_error_in(error)
    if cause is not None:
        return TLSFailure(_tls_message(url, cause))
    if isinstance(error, httpx.TimeoutException):
        return EnforcerUnreachable(f"the enforcer at {url} did not answer within {REQUEST_TIMEOUT:g}s")
    if isinstance(error, httpx.ConnectError):
        return EnforcerUnreachable(f"cannot reach the enforcer at {url}: {error}")
    if isinstance(error, httpx.RemoteProtocolError) and presented_certificate:
        # TLS 1.3 finishes the client's side of the handshake before the server checks the client's
        # certificate, so a refused certificate often surfaces as a connection closed without an answer
        return EnforcerUnreachable(
            f"the enforcer at {url} closed the connection without answering; with a client certificate this "
            "is how it refuses one it does not trust (it must be signed by the enforcer's CA and in date)"
        )
    return EnforcerUnreachable(f"the connection to the enforcer at {url} failed: {error or type(error).__name__}")


def _refusal_detail(response: httpx.Response) -> str:
    """The enforcer's ``ErrorBody`` message (or FastAPI's ``detail``) of a non-2xx answer, if it has one."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    if isinstance(body, dict):
        for key in ("message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return ""


def _status_error(url: str, response: httpx.Response) -> QueryError:
    detail = _refusal_detail(response)
    said = f": {detail}" if detail else ""
    if response.status_code == 401:
        return Unauthenticated(
            f"the enforcer at {url} needs credentials (HTTP 401{said}); "
            "pass --token-file FILE, or --cert FILE --key FILE"
        )
    if response.status_code == 403:
        return Forbidden(f"the enforcer at {url} refused these credentials (HTTP 403{said})")
    return UnexpectedAnswer(
        f"the enforcer at {url} answered HTTP {response.status_code}{said}", transient=response.status_code >= 500
    )


def _client_ssl_context(ca: Path | None, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    try:
        if ca is not None:
            return tls.client_context(ca, cert=cert, key=key)
        context = ssl.create_default_context()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert is not None:
            context.load_cert_chain(certfile=str(cert), keyfile=str(key) if key is not None else None)
        return context
    except tls.TLSConfigError as error:
        raise CredentialsError(str(error)) from None
    except (OSError, ssl.SSLError) as error:
        raise CredentialsError(f"cannot load client certificate {cert} with key {key or cert}: {error}") from None


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise CredentialsError(f"cannot read token file {path}: {error}") from None
    if not token:
        raise CredentialsError(f"token file {path} is empty")
    return token


class EnforcerReader:
    """One enforcer's read API over one connection pool; close it (or use ``with``)."""

    def __init__(
        self,
        base_url: str,
        *,
        client: httpx.Client,
        namespace: str | None = None,
        server_name: str | None = None,
        presents_certificate: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._presents_certificate = presents_certificate
        self._client = client
        self._namespace = namespace
        self._extensions: dict[str, Any] = {"sni_hostname": server_name} if server_name else {}

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> EnforcerReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _get(self, path: str, model: type[_Model], params: dict[str, str]) -> tuple[_Model, Any]:
        url = self.base_url + path
        try:
            response = self._client.get(url, params=params, extensions=self._extensions)
        except httpx.HTTPError as error:
            raise _connection_error(self.base_url, error, presented_certificate=self._presents_certificate) from None
        if response.status_code != 200:
            raise _status_error(self.base_url, response)
        try:
            raw = response.json()
            return model.model_validate(raw), raw
        except (ValueError, ValidationError) as error:
            first = str(error).splitlines()[0]
            raise UnexpectedAnswer(f"GET {url} did not answer a {model.__name__}: {first}") from None

    def snapshot(self) -> view.Snapshot:
        params = {"namespace": self._namespace} if self._namespace else {}
        allocations, raw_allocations = self._get("/allocations", contract.AllocationList, params)
        topology, raw_topology = self._get("/topology", contract.TopologyView, {})
        return view.Snapshot(allocations, topology, raw_allocations, raw_topology)


def open_reader(
    url: str,
    *,
    ca: Path | None = None,
    token_file: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    server_name: str | None = None,
    namespace: str | None = None,
) -> EnforcerReader:
    """A reader with the given credentials; raises CredentialsError for files that cannot be used."""
    headers = {"Accept": "application/json"}
    if token_file is not None:
        headers["Authorization"] = f"Bearer {_read_token(token_file)}"
    verify: ssl.SSLContext | bool = True
    if url.startswith("https://"):
        verify = _client_ssl_context(ca, cert, key)
    client = httpx.Client(
        verify=verify,
        headers=headers,
        timeout=httpx.Timeout(REQUEST_TIMEOUT),
        follow_redirects=False,
        trust_env=False,
    )
    return EnforcerReader(
        url, client=client, namespace=namespace, server_name=server_name, presents_certificate=cert is not None
    )


# -- printing, once or on change ------------------------------------------------------------


def watch(
    poll: Callable[[], str],
    *,
    interval: float,
    count: int | None,
    out: TextIO,
    clear_screen: bool,
    title: str = "",
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime.datetime] = datetime.datetime.now,
) -> int:
    """Poll ``count`` times (forever when None), drawing each answer that differs from the last one drawn.

    Transient QueryErrors are drawn in place of the answer (and so redraw once
    it is back); the others propagate.  Ctrl-C returns 0.
    """
    drawn: str | None = None
    polls = 0
    try:
        while count is None or polls < count:
            if polls:
                sleep(interval)
            polls += 1
            try:
                frame = poll()
            except QueryError as error:
                if not error.transient:
                    raise
                frame = f"numaguard allocations: {error.message} (polling again every {interval:g}s)"
            if frame == drawn:
                continue
            drawn = frame
            stamp = now().strftime("%H:%M:%S")
            if clear_screen:
                out.write(f"{CLEAR_SCREEN}Every {interval:g}s: {title}    {stamp}\n\n{frame}\n")
            elif title:
                out.write(f"--- {stamp} {title}\n{frame}\n")
            else:
                out.write(frame + "\n")
            out.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def _usage_problem(args: argparse.Namespace) -> str | None:
    try:
        url = httpx.URL(args.enforcer)
    except httpx.InvalidURL as error:
        return f"--enforcer {args.enforcer!r} is not a URL: {error}"
    if url.scheme not in ("https", "http") or not url.host:
        return f"--enforcer must be a URL such as https://HOST:PORT, not {args.enforcer!r}"
    if args.key is not None and args.cert is None:
        return "--key needs --cert"
    if not args.watch and args.count is not None:
        return "--count needs --watch"
    return None


def _warnings(args: argparse.Namespace) -> list[str]:
    if args.token_file is not None and args.enforcer.startswith("http://"):
        return ["the bearer token goes over plain http: anyone on the path can read it"]
    return []


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem is not None:
        print(f"numaguard allocations: {problem}", file=sys.stderr)
        return EXIT_USAGE
    for warning in _warnings(args):
        print(f"numaguard allocations: warning: {warning}", file=sys.stderr)
    try:
        reader = open_reader(
            args.enforcer,
            ca=args.ca,
            token_file=args.token_file,
            cert=args.cert,
            key=args.key,
            server_name=args.tls_server_name,
            namespace=args.namespace,
        )
        with reader:
            render: Callable[[view.Snapshot], str] = view.render_table
            if args.output == "wide":
                render = functools.partial(view.render_table, wide=True)
            elif args.output == "json":
                # one document per line while watching, so the stream can feed a JSON-lines consumer
                render = functools.partial(view.render_json, compact=args.watch)
            elif args.output == "yaml":
                render = view.render_yaml
            if not args.watch:
                print(render(reader.snapshot()))
                return 0
            human = args.output in ("table", "wide")
            is_terminal = sys.stdout.isatty() and human
            return watch(
                lambda: render(reader.snapshot()),
                interval=args.interval,
                count=args.count,
                out=sys.stdout,
                clear_screen=is_terminal,
                title=f"numaguard allocations --enforcer {reader.base_url}" if human else "",
            )
    except QueryError as error:
        print(f"numaguard allocations: {error.message}", file=sys.stderr)
        return EXIT_FAILED
