"""Regenerate ``docs/images/compat-report.png``: the page ``hf-neuron compat report --html`` writes,
as headless Chromium shows it after a search.

    python scripts/compat_report_screenshot.py [--output PATH] [--search TEXT]

Needs Chromium, its driver and Selenium: ``apt-get install chromium chromium-driver`` and
``pip install selenium`` (Debian's paths are the defaults; HF_NEURON_CHROMIUM and
HF_NEURON_CHROMEDRIVER name others). The browser test of the page
(``tests/compatibility/test_html_report_browser.py``) starts its browser with :func:`headless_chromium`
from here, so the screenshot and the test see the page the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("HF_NEURON_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HF_NEURON_CHROMEDRIVER", "/usr/bin/chromedriver")
INSTALL = "apt-get install chromium chromium-driver; pip install selenium"


def missing_browser() -> str | None:
    """Why a headless Chromium cannot be driven here, with how to install what is missing; None when it can."""
    missing = [what for what, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER))
               if not (os.path.isfile(path) and os.access(path, os.X_OK))]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium")
    if not missing:
        return None
    return f"no {', '.join(missing)} (looked for {CHROMIUM} and {CHROMEDRIVER}): {INSTALL}"


def headless_chromium(width: int = 1280, height: int = 900):
    """A Selenium driver of a headless Chromium whose page area is ``width`` x ``height``, with the
    browser console recorded (``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    # Both the browser and its driver named: Selenium Manager then downloads nothing.
    options.binary_location = CHROMIUM
    # No sandbox: containers and CI runners often run as root, where Chromium's sandbox cannot start;
    # /dev/shm is small in containers, so shared memory goes to /tmp.
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    # --window-size counts the window's frame too; this makes the page itself width x height.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver


def screenshot(output: Path, search: str) -> Path:
    from selenium.webdriver.common.by import By

    from hf_neuron.compat.html_report import write_site

    site = Path(tempfile.mkdtemp(prefix="hf-neuron-compat-report-"))
    try:
        index = write_site(site)
        driver = headless_chromium()
        try:
            driver.get(index.as_uri())
            driver.find_element(By.ID, "search").send_keys(search)
            # The headline, the controls and the matching rows in one view; the levels legend above is text.
            driver.execute_script("document.getElementById('headline-title').scrollIntoView()")
            output.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(output))
        finally:
            driver.quit()
    finally:
        shutil.rmtree(site)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "compat-report.png")
    parser.add_argument("--search", default="gemma", help="typed into the search box (default: %(default)s)")
    args = parser.parse_args(argv)
    why = missing_browser()
    if why:
        print(f"compat_report_screenshot: error: {why}", file=sys.stderr)
        return 2
    print(screenshot(args.output, args.search))
    return 0


if __name__ == "__main__":
    sys.exit(main())
