"""The documentation site as a reader meets it: built with `mkdocs build --strict` (as `make docs`), served on
127.0.0.1, opened in headless Chromium, and its search finds the pages on resuming, sweeps and DreamerV3; the page loads nothing from other hosts."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.e2e.test_inspect_browser import CHROMIUM, TIMEOUT_MS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}: install Debian's chromium package "
                                                  "(make install does where apt-get can)")
def test_the_site_builds_strictly_and_its_search_finds_resume_sweep_and_dreamer(tmp_path):
    from playwright.sync_api import sync_playwright

    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (site / "reference" / "config" / "index.html").exists()
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    requested: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            try:
                tab = browser.new_page()
                tab.on("request", lambda request: requested.append(request.url))
                tab.set_default_timeout(TIMEOUT_MS)
                tab.goto(f"http://127.0.0.1:{server.server_address[1]}/")
                assert "rlfoundry" in tab.title()
                tab.keyboard.press("/")  # Material's shortcut to the search box
                box, meta = tab.locator("input.md-search__input"), tab.locator(".md-search-result__meta")
                for word in ("resume", "sweep", "DreamerV3"):
                    found = ""
                    for _ in range(60):  # until the search worker has its index (a few seconds after the page)
                        box.fill("")
                        box.press_sequentially(word)
                        tab.wait_for_timeout(500)
                        found = meta.inner_text()
                        if "matching document" in found:
                            break
                    assert "matching document" in found and tab.locator(".md-search-result__item").count(), word
            finally:
                browser.close()
    finally:
        server.shutdown()
    local = f"http://127.0.0.1:{server.server_address[1]}/"
    assert [url for url in requested if not url.startswith(local)] == []  # nothing from other hosts


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:  # noqa: A002 (the base class's name)
        pass
