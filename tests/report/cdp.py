"""Headless Chromium driven over the Chrome DevTools Protocol, for the report's browser tests.

One browser per test module. ``Browser.open(path)`` loads a file URL with the network
emulated offline and returns what happened: console errors, uncaught exceptions, dialogs
(``alert``), every request the page made, and per chart container whether it holds an SVG
or canvas. ``Browser.viewport(width, height)`` sizes the window; ``Browser.screenshot(path)``
writes a full-page PNG, or the first ``height`` pixels.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import websocket

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]

_CHARTS_JS = """
Array.from(document.querySelectorAll('.chart')).map(el => ({
  id: el.id, name: el.dataset.chart,
  drawn: !!el.querySelector('svg, canvas'),
  renderer: el.querySelector('canvas') ? 'canvas' : el.querySelector('svg') ? 'svg' : null,
  marks: el.querySelectorAll('svg .mark-rect path, svg .mark-symbol path, svg path, svg line')
    .length,
}))
"""


def chromium_path() -> str | None:
    """The Chromium binary, where installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageResult:
    """What one page load did."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    console_warnings: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    charts: list[dict] = field(default_factory=list)
    load_s: float = 0.0


class Browser:
    """One headless Chromium process and a websocket to its first page."""

    def __init__(self, binary: str) -> None:
        # (ignore_cleanup_errors: a helper process of Chromium may still write to the profile
        # as the browser ends)
        self._profile = tempfile.TemporaryDirectory(
            prefix="tw-chromium-", ignore_cleanup_errors=True
        )
        self._proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._port(Path(self._profile.name) / "DevToolsActivePort")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t["type"] == "page")
        self._ws = websocket.create_connection(
            page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True
        )
        self._id = 0
        self._events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call(
            "Network.emulateNetworkConditions",
            offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1,
        )  # fmt: skip
        self.viewport(1280, 900)

    def viewport(self, width: int, height: int) -> None:
        """Set the window's size in CSS pixels (the first screen a reader sees)."""
        self.width = width
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)  # fmt: skip

    def _port(self, marker: Path) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if marker.exists():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port within 30 s")

    def call(self, method: str, **params: object) -> dict:
        """Send one command and wait for its answer; events meanwhile are kept."""
        self._id += 1
        my_id = self._id
        self._ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._on_event(msg)

    def _on_event(self, msg: dict) -> None:
        self._events.append(msg)
        if msg["method"] == "Page.javascriptDialogOpening":
            # answer at once, or the page stays blocked; the dialog is recorded as a failure
            self._ws.send(
                json.dumps(
                    {"id": 0, "method": "Page.handleJavaScriptDialog", "params": {"accept": True}}
                )
            )

    def evaluate(self, expression: str) -> object:
        """The JSON value of a JavaScript expression in the page."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in res:
            raise RuntimeError(f"evaluate failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def open(self, path: Path, *, timeout_s: float = 20.0) -> PageResult:
        """Load ``path`` and wait until every chart container holds an SVG or canvas."""
        self.call("Page.navigate", url="about:blank")
        self._events.clear()
        url = path.resolve().as_uri()
        start = time.monotonic()
        self.call("Page.navigate", url=url)
        charts: list[dict] = []
        deadline = start + timeout_s
        while time.monotonic() < deadline:
            state = self.evaluate("document.readyState")
            if state == "complete":
                charts = self.evaluate(_CHARTS_JS) or []
                if all(c["drawn"] for c in charts):
                    break
            time.sleep(0.05)
        result = PageResult(url=url, charts=charts, load_s=time.monotonic() - start)
        self.evaluate("0")  # drain events that arrived during the wait
        for ev in self._events:
            self._record(ev, result)
        return result

    @staticmethod
    def _record(ev: dict, result: PageResult) -> None:
        method, p = ev["method"], ev.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            if p["type"] in ("error", "assert"):
                result.console_errors.append(text)
            elif p["type"] == "warning":
                result.console_warnings.append(text)
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            result.exceptions.append(d.get("exception", {}).get("description", d.get("text")))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            result.console_errors.append(p["entry"].get("text", ""))
        elif method == "Page.javascriptDialogOpening":
            result.dialogs.append(f"{p.get('type')}: {p.get('message')}")
        elif method == "Network.requestWillBeSent":
            result.requests.append(p["request"]["url"])

    def text(self) -> str:
        """The page's visible text plus the text of every SVG (chart labels)."""
        return str(self.evaluate(
            "document.body.innerText + '\\n' + Array.from(document.querySelectorAll('svg'))"
            ".map(s => s.textContent).join('\\n')"
        ))  # fmt: skip

    def screenshot(self, path: Path, height: int | None = None) -> None:
        """A PNG of the current page from its top: ``height`` pixels (the first screen), or
        the whole page."""
        if height is None:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            height = min(int(size["height"]) + 1, 16000)
        shot = self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1},
        )  # fmt: skip
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        """End the browser and remove its profile."""
        try:
            self._ws.close()
        finally:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._profile.cleanup()
