"""The live NUMA map at /ui: only with read credentials, and what a real browser draws from the seed pods.

The app under test is a tiny FastAPI app: the UI router behind a fake read
dependency (a bearer token), plus /allocations and /topology answering the
recorded enforcer answers for seed scenario 1 (``tests/fixtures/views``: the
database on CPUs 1-3,17-19 pod-exclusive, its sidecars on 4,20 pod-shared,
plus a node-exclusive and a burstable pod on dual-socket-ht-32).

The browser tests run Debian's headless Chromium against that app served by
uvicorn on loopback (plain HTTP: TLS is the service's business, not the
page's).  Chromium is installed on first use when missing, we are root and
NUMAGUARD_NO_APT is unset; otherwise those tests skip and say why.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Header, HTTPException

from enforcer.service import deps, main, ui
from enforcer.service.settings import EnforcerSettings
from servicekit import serve

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "views"
TOKEN = "ui-test-token"
# what the README's recipe (`head -c 24 /dev/urandom | base64`) makes: '+', '/' and, for other lengths, '='
BASE64_TOKEN = "q+/9Zm8xR1V0+bGh6dWx/cA=="
DATABASE = "default/tightly-coupled-database"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_TIMEOUT = 120.0
APT_INSTALL_TIMEOUT = 420.0
APT_UPDATE_TIMEOUT = 120.0
# The first browser test pays for installing chromium in its setup, which pytest-timeout counts.
BROWSER_TEST_TIMEOUT = int(2 * APT_INSTALL_TIMEOUT + APT_UPDATE_TIMEOUT + 4 * CHROMIUM_TIMEOUT)
HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def fake_reader(authorization: Annotated[str | None, Header()] = None) -> str:
    """The read API's rule, reduced to a bearer token: nothing is 401, anything else but the token is 403."""
    if not authorization:
        raise HTTPException(401, "credentials required", headers={"WWW-Authenticate": "Bearer"})
    if authorization not in (f"Bearer {TOKEN}", f"Bearer {BASE64_TOKEN}"):
        raise HTTPException(403, "the bearer token is not valid")
    return "reader"


def seed_app() -> FastAPI:
    app = FastAPI()
    app.include_router(ui.ui_router(fake_reader))

    @app.get("/allocations")
    def allocations(_: Annotated[str, Depends(fake_reader)]) -> Any:
        return recorded("seed-1-allocations.json")

    @app.get("/topology")
    def topology(_: Annotated[str, Depends(fake_reader)]) -> Any:
        return recorded("seed-1-topology.json")

    return app


class Client:
    """In-process GETs (httpx's ASGI transport; no lifespan, no server)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def get(self, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
        async def fetch() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://enforcer") as client:
                return await client.get(path, headers=headers or {})

        return asyncio.run(fetch())


@pytest.fixture(scope="module")
def client() -> Client:
    return Client(seed_app())


# -- who gets the page -----------------------------------------------------------------------


def test_map_page_without_credentials_is_refused_with_401(client: Client) -> None:
    response = client.get("/ui")
    assert response.status_code == 401
    assert "numa-map" not in response.text


def test_map_page_with_a_wrong_token_is_refused_with_403(client: Client) -> None:
    response = client.get("/ui", headers={"Authorization": "Bearer not-the-token", **HTML})
    assert response.status_code == 403
    assert 'id="numa-map"' not in response.text


def test_map_page_is_served_with_the_read_credentials(client: Client) -> None:
    response = client.get("/ui", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert 'id="numa-map"' in response.text
    assert response.headers["cache-control"] == "no-store"


def test_api_clients_refused_at_ui_keep_the_apps_own_error_body(client: Client) -> None:
    response = client.get("/ui", headers={"Accept": "application/json"})
    assert response.status_code == 401
    assert response.json() == {"detail": "credentials required"}


def test_browser_navigation_without_credentials_gets_the_sign_in_page_and_not_the_map(client: Client) -> None:
    response = client.get("/ui", headers=HTML)
    assert response.status_code == 401
    assert 'id="numaguard-sign-in"' in response.text
    assert 'id="numa-map"' not in response.text
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_refusal_other_than_authentication_is_passed_through_unchanged() -> None:
    def unavailable() -> None:
        raise HTTPException(503, "not ready")

    app = FastAPI()
    app.include_router(ui.ui_router(unavailable))
    response = Client(app).get("/ui", headers=HTML)
    assert response.status_code == 503
    assert response.json() == {"detail": "not ready"}


def test_the_enforcer_app_serves_the_map_behind_its_own_read_authentication(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    app = main.create_app(EnforcerSettings(node_name="node-a", token_file=token_file))
    app.include_router(ui.ui_router(deps.require_reader))
    client = Client(app)  # no lifespan: the page needs no node state
    assert client.get("/ui").json()["reason"] == "Unauthorized"
    assert client.get("/ui", headers=HTML).status_code == 401
    assert 'id="numaguard-sign-in"' in client.get("/ui", headers=HTML).text
    assert client.get("/ui", headers={"Authorization": "Bearer wrong"}).status_code == 403
    answer = client.get("/ui", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert 'id="numa-map"' in answer.text


# -- what the page may load -----------------------------------------------------------------


@pytest.mark.parametrize("page", [ui.MAP_PAGE, ui.SIGN_IN_PAGE])
def test_pages_load_nothing_from_anywhere_else(page: str) -> None:
    html = ui.load_page(page).html
    assert "http://" not in html and "https://" not in html
    assert "<link" not in html and " src=" not in html and "@import" not in html


def test_content_security_policy_allows_only_this_origin_and_the_pages_own_inline_code(client: Client) -> None:
    policy = client.get("/ui", headers={"Authorization": f"Bearer {TOKEN}"}).headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert all(source.startswith("'sha256-") for source in directives["script-src"].split())
    assert len(directives["script-src"].split()) == 2  # the map's script and the sign-in page's


# -- a real browser --------------------------------------------------------------------------


def _apt_install_chromium() -> str | None:
    """Install Debian's chromium; None when it worked, else why not."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "chromium"]
    try:
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=APT_INSTALL_TIMEOUT)
        if done.returncode != 0:  # stale package lists are the usual cause: refresh once
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True, timeout=APT_UPDATE_TIMEOUT)
            done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=APT_INSTALL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"apt-get install -y chromium failed: {error}"
    if done.returncode != 0:
        return f"apt-get install -y chromium failed: {done.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.geteuid() != 0:
            pytest.skip(f"{CHROMIUM} is missing and installing it needs root (apt-get install -y chromium)")
        if os.environ.get("NUMAGUARD_NO_APT"):
            pytest.skip(f"{CHROMIUM} is missing and NUMAGUARD_NO_APT forbids installing it")
        problem = _apt_install_chromium()
        if problem is not None or not CHROMIUM.exists():
            pytest.skip(problem or f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    with serve.BackgroundServer(seed_app()) as server:
        yield f"http://127.0.0.1:{server.port}"


def run_chromium(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@dataclass(frozen=True)
class Cell:
    cpu: int
    state: str
    pod: str | None
    containers: frozenset[str]
    background: str = field(default="", compare=False)
    shared_pods: frozenset[str] = field(default=frozenset(), compare=False)


class CellParser(HTMLParser):
    """Collects the map's CPU cells (elements with ``data-cpu``) and the status line's state."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[Cell] = []
        self.status: str | None = None
        self.sign_in: str | None = None  # the sign-in page's state, when that is the page shown
        self.swatches: dict[str, str] = {}  # pod -> the rgb() of its swatch in the pods list
        self._pod: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id") == "status":
            self.status = a.get("data-state")
        if a.get("id") == "sign-in-status":
            self.sign_in = a.get("data-state")
        if a.get("class") == "pod" and a.get("data-pod"):
            self._pod = a.get("data-pod")
        if a.get("class") == "swatch" and self._pod is not None:
            colour = re.search(r"background:\s*(rgb\([^)]*\))", a.get("style") or "")
            if colour:
                self.swatches[self._pod] = colour.group(1)
        if a.get("data-cpu") is not None:
            containers = frozenset(filter(None, (a.get("data-containers") or "").split(",")))
            background = re.search(r"background:\s*(rgb\([^)]*\))", a.get("style") or "")
            self.cells.append(
                Cell(
                    int(a["data-cpu"] or -1),
                    a.get("data-state") or "",
                    a.get("data-pod"),
                    containers,
                    background.group(1) if background else "",
                    frozenset(filter(None, (a.get("data-shared-pods") or "").split(","))),
                )
            )


def rendered(dom: str) -> CellParser:
    parser = CellParser()
    parser.feed(dom)
    return parser


@pytest.mark.timeout(BROWSER_TEST_TIMEOUT)
def test_headless_chromium_draws_the_seed_pods_on_their_cpus(chromium: Path, live_url: str, tmp_path: Path) -> None:
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", f"{live_url}/ui#token={TOKEN}").stdout
    page = rendered(dom)
    assert page.status == "live"
    cells = {cell.cpu: cell for cell in page.cells}
    assert sorted(cells) == list(range(32)) and len(page.cells) == 32
    for cpu in (1, 2, 3, 17, 18, 19):
        assert cells[cpu] == Cell(cpu, "pod_exclusive", DATABASE, frozenset({"database"}))
    for cpu in (4, 20):
        assert cells[cpu] == Cell(cpu, "pod_shared", DATABASE, frozenset({"metrics-exporter", "backup-agent"}))
    for cpu in (5, 6, 21, 22):
        assert cells[cpu] == Cell(cpu, "node_exclusive", "shop/web", frozenset({"nginx"}))
    assert {c.cpu for c in page.cells if c.state == "reserved"} == {0, 16}
    assert {c.cpu for c in page.cells if c.state == "free"} == {7, 23, *range(8, 16), *range(24, 32)}
    # the Burstable pod runs on the node shared pool: every free and reserved CPU carries it
    shared = {c.cpu for c in page.cells if "jobs/batch" in c.shared_pods}
    assert shared == {0, 16, 7, 23, *range(8, 16), *range(24, 32)}
    assert all(not c.shared_pods for c in page.cells if c.state not in ("free", "reserved"))


def _hue(rgb: str) -> float:
    import colorsys

    red, green, blue = (int(v) / 255 for v in re.findall(r"\d+", rgb))
    return colorsys.rgb_to_hls(red, green, blue)[0] * 360


@pytest.mark.timeout(BROWSER_TEST_TIMEOUT)
def test_headless_chromium_gives_every_pod_a_clearly_different_hue(
    chromium: Path, live_url: str, tmp_path: Path
) -> None:
    page = rendered(run_chromium(chromium, tmp_path / "profile", "--dump-dom", f"{live_url}/ui#token={TOKEN}").stdout)
    hues = {pod: _hue(rgb) for pod, rgb in page.swatches.items()}
    assert set(hues) == {DATABASE, "shop/web", "jobs/batch"}
    values = sorted(hues.values())
    gaps = [b - a for a, b in zip(values, values[1:], strict=False)] + [360 - values[-1] + values[0]]
    assert min(gaps) > 60, hues  # golden-angle steps: three pods are at least 90 degrees apart


@pytest.mark.timeout(BROWSER_TEST_TIMEOUT)
@pytest.mark.parametrize(
    "fragment",
    [f"#token={BASE64_TOKEN}", "#token=" + BASE64_TOKEN.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")],
    ids=["as base64 prints it", "percent-encoded"],
)
def test_headless_chromium_signs_in_with_a_base64_token(
    chromium: Path, live_url: str, tmp_path: Path, fragment: str
) -> None:
    """'+' must stay '+' (URLSearchParams would make it a space and the token would be refused)."""
    page = rendered(run_chromium(chromium, tmp_path / "profile", "--dump-dom", f"{live_url}/ui{fragment}").stdout)
    assert page.status == "live"
    assert len(page.cells) == 32


@pytest.mark.timeout(BROWSER_TEST_TIMEOUT)
@pytest.mark.parametrize(
    ("fragment", "state"), [("", "waiting"), ("#token=not-the-token", "refused")], ids=["no token", "wrong token"]
)
def test_headless_chromium_without_the_token_stays_on_the_sign_in_page_and_shows_no_cpus(
    chromium: Path, live_url: str, tmp_path: Path, fragment: str, state: str
) -> None:
    page = rendered(run_chromium(chromium, tmp_path / "profile", "--dump-dom", f"{live_url}/ui{fragment}").stdout)
    assert page.sign_in == state
    assert page.cells == []


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    rows: list[bytes]  # RGB or RGBA, unfiltered
    channels: int

    def count(self, rgb: tuple[int, int, int]) -> int:
        wanted = bytes(rgb)
        step = self.channels
        return sum(1 for row in self.rows for x in range(0, len(row), step) if row[x : x + 3] == wanted)


def _unfilter(kind: int, line: bytearray, previous: bytes, bpp: int) -> bytearray:
    """PNG row filters (RFC 2083 6.2): the decoder side of what the encoder chose per row."""
    if kind == 1:
        for i in range(bpp, len(line)):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:
        line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
    elif kind == 3:
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + (left + previous[i]) // 2) & 0xFF
    elif kind == 4:
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b, c = previous[i], previous[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return line


def decode_png(data: bytes) -> Picture:
    """Enough of PNG for Chromium's screenshots: 8-bit RGB/RGBA, not interlaced."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, bytearray(), b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    channels = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(bytes(idat)), width * channels
    rows: list[bytes] = []
    previous = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = _unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), previous, channels)
        previous = bytes(line)
        rows.append(previous)
    return Picture(width, height, rows, channels)


@pytest.mark.timeout(BROWSER_TEST_TIMEOUT)
def test_headless_chromium_screenshot_shows_the_database_pods_cpus_in_its_colour(
    chromium: Path, live_url: str, tmp_path: Path
) -> None:
    url = f"{live_url}/ui#token={TOKEN}"
    cells = {c.cpu: c for c in rendered(run_chromium(chromium, tmp_path / "dom", "--dump-dom", url).stdout).cells}
    colour = tuple(int(v) for v in re.findall(r"\d+", cells[1].background))
    assert len(colour) == 3 and all(cells[cpu].background == cells[1].background for cpu in (2, 3, 17, 18, 19))
    shot = tmp_path / "numa.png"
    run_chromium(chromium, tmp_path / "shot", f"--screenshot={shot}", "--window-size=1400,900", url)
    picture = decode_png(shot.read_bytes())
    assert (picture.width, picture.height) == (1400, 900)
    # six solid 44x38 cells minus their digits and borders, plus the striped pod-shared cells and the swatch
    assert picture.count((colour[0], colour[1], colour[2])) > 6 * 900
    keep = os.environ.get("NUMAGUARD_KEEP_SCREENSHOT")
    if keep:  # how docs/numa-map.png is refreshed
        shutil.copyfile(shot, keep)
