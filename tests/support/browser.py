"""Headless Chromium (Debian's ``chromium`` and ``chromium-driver`` packages) driven by
Selenium, for the dashboard's browser tests; never a downloaded browser."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
T = TypeVar("T")
WIDE = (1440, 1000)
PHONE = (390, 844)
# Where a run's screenshots go: JOBQ_SCREENSHOTS (docs/screenshots to refresh the
# README's), else the test's temporary directory.
SCREENSHOTS_VARIABLE = "JOBQ_SCREENSHOTS"


class Browser:
    """One headless Chromium window against one server."""

    def __init__(self, base_url: str, screenshots: Path) -> None:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={WIDE[0]},{WIDE[1]}", "--lang=en-US"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_window_size(*WIDE)
        self.base_url = base_url
        self.screenshots = screenshots
        screenshots.mkdir(parents=True, exist_ok=True)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """The element's text; found again if the live refresh replaced it meanwhile."""
        return self._fresh(css, lambda element: element.text)

    def click(self, css: str) -> None:
        """Click the element; found again if the live refresh replaced it between the
        find and the click (a stale element is refused before any click is delivered)."""
        self._fresh(css, lambda element: element.click())

    def _fresh(self, css: str, use: Callable[[WebElement], T]) -> T:
        """``use`` of the element ``css`` names, found again (up to five times) while the
        live refresh replaces it between the find and the use."""
        for _ in range(5):
            try:
                return use(self.find(css))
            except StaleElementReferenceException:
                continue
        return use(self.find(css))

    def script(self, code: str, *args: Any) -> Any:
        return self.driver.execute_script(code, *args)

    def press(self, key: str) -> None:
        """Press ``key`` on whatever has the focus, as a keyboard does (no element held
        between two calls: the live refresh may replace it, and moves the focus to its
        replacement)."""
        ActionChains(self.driver).send_keys(key).perform()

    def focused(self) -> str:
        """The id of the element that has the focus, else its tag name, read in one call."""
        return self.script("var e = document.activeElement; return e.id || e.tagName.toLowerCase()")

    def console_errors(self) -> list[dict[str, Any]]:
        """The browser's console errors since the last call (a failed load included)."""
        return [entry for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, name: str, size: tuple[int, int] = WIDE) -> int:
        """Save the page as it looks at ``size``; return how wide its content is then
        (wider than the window: the page scrolls sideways)."""
        if size != WIDE:
            self.driver.set_window_size(*size)
            time.sleep(0.2)
        self.driver.save_screenshot(str(self.screenshots / f"{name}.png"))
        width = self.script("return document.documentElement.scrollWidth")
        if size != WIDE:
            self.driver.set_window_size(*WIDE)
        return int(width)

    def quit(self) -> None:
        self.driver.quit()


def screenshot_dir(default: Path) -> Path:
    chosen = os.environ.get(SCREENSHOTS_VARIABLE)
    return Path(chosen) if chosen else default
