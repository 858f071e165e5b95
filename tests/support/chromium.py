"""Headless Chromium for report tests: one-shot runs (``--dump-dom``, ``--screenshot``), a PNG
decoder to look at the pixels, and one tab driven over the DevTools protocol (loopback only) for
real clicks. Tests using it carry ``@pytest.mark.chromium`` and call :func:`need_chromium`."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from support.tools import require

CHROMIUM = Path("/usr/bin/chromium")


def need_chromium(wait_s: float = 300) -> None:
    """Chromium may still be being installed when the suite starts: wait a little, then require it."""
    deadline = time.monotonic() + wait_s
    while not CHROMIUM.exists() and time.monotonic() < deadline:
        time.sleep(5)
    require("chromium", CHROMIUM.exists, "apt-get install -y chromium")


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered RGB(A) rows of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={user_data}", *args],
        capture_output=True, text=True, timeout=180,
    )


class Page:
    """One Chromium tab over the DevTools protocol (loopback websocket), for a real click."""

    def __init__(self, ws_url: str) -> None:
        import websocket  # websocket-client (installed with the kubernetes client)

        self.ws = websocket.create_connection(ws_url, timeout=30)
        self._id = 0

    def call(self, method: str, **params: object) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def js(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        self.ws.close()

    def wait_ready(self, timeout_s: float = 30) -> None:
        """Until the report's inline script has run (``<body data-ready="1">``)."""
        deadline = time.monotonic() + timeout_s
        while self.js("document.body && document.body.getAttribute('data-ready')") != "1":
            assert time.monotonic() < deadline, "report did not finish loading"
            time.sleep(0.2)

    def click(self, x: float, y: float) -> None:
        """One real left click at viewport coordinates."""
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def box(self, selector_js: str) -> dict[str, float]:
        """The viewport rectangle of the element ``selector_js`` evaluates to."""
        return json.loads(str(self.js(f"JSON.stringify(({selector_js}).getBoundingClientRect())")))

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])


@contextmanager
def open_tab(url: str, profile: Path, *, width: int = 1280, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium (DevTools on 127.0.0.1 only) showing ``url`` in one tab; stopped after."""
    proc = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
         "--disable-background-networking", "--disable-component-update", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", f"--window-size={width},{height}", f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        tab = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        try:
            tab.call("Page.navigate", url=url)
            tab.wait_ready()
            yield tab
        finally:
            tab.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def dark_pixels(png: bytes, top: float, height: float) -> int:
    """How many dark (text-like) pixels a screenshot has in the band [top, top + height)."""
    _, _, rows = decode_png(png)
    band = rows[int(top):int(top + height)]
    return sum(1 for row in band for i in range(0, len(row), 3) if sum(row[i:i + 3]) < 200)
