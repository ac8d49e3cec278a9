"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe`.

Chromium reads NUL-terminated JSON commands on fd 3 and writes replies and events on
fd 4, so no websocket library is needed. Enough for the admin page's browser test:
open a page, navigate, evaluate JavaScript, click and wait for the next document,
take screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
]


class CdpError(RuntimeError):
    pass


class Browser:
    def __init__(self, executable: str = CHROMIUM, timeout: float = 15.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="jobledger-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire() -> None:  # in the child, before exec: fd 3 = commands, fd 4 = replies
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=wire,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # --- transport ---------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_child, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._cond:
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self.events.append(message)
                    self._cond.notify_all()

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise CdpError(f"no reply to {method}")
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def new_page(self, width: int = 1366, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        with contextlib.suppress(CdpError, OSError):
            self.send("Browser.close")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._reader.join(timeout=5)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def js(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate",
            {
                "expression": expression,
                "returnByValue": True,
                "awaitPromise": True,
            },
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _wait_new_document(self) -> None:
        deadline = time.monotonic() + self.browser.timeout
        while time.monotonic() < deadline:
            try:
                if self.js("window.__old === undefined && document.readyState === 'complete'"):
                    return
            except CdpError:
                pass  # the context is being replaced
            time.sleep(0.05)
        raise CdpError("the next document did not load")

    def goto(self, url: str) -> None:
        self.js("window.__old = true")
        self.call("Page.navigate", {"url": url})
        self._wait_new_document()

    def click(self, selector: str) -> None:
        """Click `selector` (confirm() dialogs answered yes) and wait for the next page."""
        self.js("window.__old = true; window.confirm = () => true")
        found = self.js(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return false; el.click(); return true; })()"
        )
        if not found:
            raise CdpError(f"nothing matches {selector}")
        self._wait_new_document()

    def fill(self, selector: str, value: str) -> None:
        ok = self.js(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            f" if (!el) return false; el.value = {json.dumps(value)}; return true; }})()"
        )
        if not ok:
            raise CdpError(f"nothing matches {selector}")

    def text(self, selector: str = "body") -> str:
        value = self.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''")
        return str(value)

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
