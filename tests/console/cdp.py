"""Headless Chromium driven over the DevTools protocol: a small synchronous client (one
websocket per page, ``websocket-client``), enough to load pages, run JavaScript, click, wait
for the DOM and take screenshots.

Chromium is Debian's (``scripts/install_chromium.sh``), started with a fresh profile and
``--remote-debugging-port=0``: it writes the port it chose into ``DevToolsActivePort`` in the
profile folder.  Every wait is bounded.
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--hide-scrollbars", "--remote-debugging-port=0",
)  # fmt: skip
START_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 30.0


class BrowserError(RuntimeError):
    """Chromium did not start, or a DevTools call failed."""


class Page:
    """One tab: DevTools calls over its websocket; events that arrive meanwhile are kept."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=CALL_TIMEOUT_S, suppress_origin=True)
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            self.events.append(message)
        raise BrowserError(f"{method}: no answer in {CALL_TIMEOUT_S} s")

    def _wait_event(self, method: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for index, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(index)
            self.ws.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
            finally:
                self.ws.settimeout(CALL_TIMEOUT_S)
        raise BrowserError(f"no {method} within {timeout_s} s")

    def goto(self, url: str, timeout_s: float = 30.0) -> None:
        self.call("Page.enable")
        self.events.clear()
        result = self.call("Page.navigate", url=url)
        if "loaderId" in result:  # a new document (a change of #hash only is not one)
            self._wait_event("Page.loadEventFired", timeout_s)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20.0) -> Any:
        """Until the JavaScript ``expression`` is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"not true within {timeout_s} s: {expression}")

    def click(self, selector: str) -> None:
        found = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (e) e.click(); return !!e; }})()")
        if not found:
            raise BrowserError(f"nothing to click at {selector}")

    def text(self, selector: str) -> str:
        return str(self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''"))

    def set_headers(self, headers: dict[str, str]) -> None:
        self.call("Network.enable")
        self.call("Network.setExtraHTTPHeaders", headers=headers)

    def screenshot(self, path: Path, width: int = 1280, height: int = 860) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.ws.close()


class Browser:
    """A headless Chromium process with a fresh profile in ``profile_dir``."""

    def __init__(self, executable: str, profile_dir: Path) -> None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        self.profile_dir = profile_dir
        self.log = open(profile_dir / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            self.port = self._wait_port()
        except BaseException:
            self.close()
            raise

    def _wait_port(self) -> int:
        marker = self.profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self.proc.returncode}; see {self.profile_dir / 'chromium.log'}")
            lines = marker.read_text().splitlines() if marker.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f"chromium did not open its DevTools port in {START_TIMEOUT_S} s")

    def new_page(self) -> Page:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as answer:
            target = json.load(answer)
        return Page(target["webSocketDebuggerUrl"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
