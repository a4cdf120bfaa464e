"""Headless Chromium for the dashboard's tests, driven through chromedriver
(Debian's `chromium` and `chromium-driver`; `scripts/test.sh` installs them).

`browser` gives a fresh `Page` per test: its own profile, closed at the end.
Screenshots go to `ARTIFACTS` (`VIGIL_E2E_ARTIFACTS`, default
`target/e2e-artifacts` in the repo), kept after the run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from support import DEADLINE

ARTIFACTS = Path(
    os.environ.get("VIGIL_E2E_ARTIFACTS", Path(__file__).resolve().parents[2] / "target" / "e2e-artifacts")
)

T = TypeVar("T")


class Page:
    """One browser window; every wait polls the DOM with a deadline."""

    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    def open(self, url: str) -> None:
        self.driver.get(url)

    def all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, probe: Callable[[], T], until: Callable[[T], bool], what: str) -> T:
        """Polls `probe()` until `until(result)`; fails after the deadline with the last result."""
        end = time.monotonic() + DEADLINE
        last: Any = None
        while True:
            try:
                last = probe()
                if until(last):
                    return last
            except WebDriverException as exc:  # an element replaced mid-read
                last = exc
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {DEADLINE}s waiting for {what}; last saw: {last!r}")
            time.sleep(0.05)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"could not save {path}"
        return path

    def console_errors(self) -> list[str]:
        """Severe console messages other than HTTP error answers (401, 409, ...),
        which Chromium logs for every refused request the page handles."""
        return [
            e["message"]
            for e in self.driver.get_log("browser")
            if e["level"] == "SEVERE" and e.get("source") != "network"
        ]


@pytest.fixture
def browser() -> Iterator[Page]:
    chromium = shutil.which("chromium")
    driver_bin = shutil.which("chromedriver")
    if not chromium or not driver_bin:
        pytest.fail(
            "chromium and chromedriver are needed (Debian: apt-get install chromium chromium-driver; "
            "scripts/test.sh installs them)",
            pytrace=False,
        )
    profile = tempfile.mkdtemp(prefix="vigil-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # The machine's network is closed: no background traffic, no first-run work.
    for flag in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        # A DNS name rebound to loopback, for the control API's rebinding test.
        "--host-resolver-rules=MAP evil.example 127.0.0.1",
        f"--user-data-dir={profile}",
    ]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_bin), options=options)
    try:
        yield Page(driver)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
