# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""The HTML page of `shoal serve`, driven in headless Chromium (Debian's chromium and
chromium-driver, through Selenium): submit a script, watch it finish, download a result."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.script.script_helpers import needs_nco, write_model
from tests.test_serve_common import needs_aiohttp, serve  # noqa: F401

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")
pytestmark = [
    needs_aiohttp, pytest.mark.timeout(180),
    pytest.mark.skipif(CHROMEDRIVER is None or CHROMIUM is None,
                       reason="chromium and chromium-driver not installed (scripts/setup.sh)"),
]


@pytest.fixture
def browser(tmp_path: Path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1200,1600", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    # the Debian driver, never one selenium-manager would download
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    drv.downloads = downloads
    try:
        yield drv
    finally:
        drv.quit()


def _wait(cond, timeout: float = 60, what: str = "") -> object:
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@needs_nco
def test_page_submits_watches_and_downloads(serve, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    srv = serve()
    write_model(srv.data / "sresalb_m0.nc", 0)
    root = srv.json("GET", "/api/v1/data")["root"]
    upload = tmp_path / "extra.txt"
    upload.write_text("uploaded line\n")
    drv = browser
    drv.get(srv.url + "/")
    assert drv.title == "shoal serve"
    find = lambda i: drv.find_element(By.ID, i)  # noqa: E731
    find("token").send_keys(srv.tokens["alice"])
    # the data listing shows the paths scripts use
    find("showdata").click()
    _wait(lambda: f"{root}/sresalb_m0.nc" in find("data").text, what="data listing")
    script = find("script")
    script.clear()
    script.send_keys("#!/bin/bash\nset -e\nncra -O $1/sresalb_m0.nc mean.nc\n"
                     "ncks -H -v tas mean.nc > mean.txt\ncat extra.txt\n"
                     "for i in 1 2 3; do echo step $i; sleep 0.2; done\n")
    find("args").send_keys(root)
    find("inputs").send_keys(str(upload))
    find("submit").click()
    job = _wait(lambda: find("jobid").text, what="job id")
    _wait(lambda: find("state").text == "succeeded", what="the job to succeed")
    assert find("error").text == ""
    _wait(lambda: "[shoal serve] job succeeded" in find("log").text, what="the whole log")
    log = find("log").text
    assert "uploaded line" in log and "step 3" in log
    links = _wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#outputs a.download"),
                  what="output links")
    names = sorted(a.text for a in links)
    assert names == ["extra.txt", "mean.nc", "mean.txt"]
    next(a for a in links if a.text == "mean.txt").click()
    got = _wait(lambda: [p for p in browser.downloads.iterdir() if p.name == "mean.txt"],
                what="the download")[0]
    _, _, expected = srv.request("GET", f"/api/v1/jobs/{job}/outputs/mean.txt")
    assert got.read_bytes() == expected and b"tas" in expected
    # a failing job shows its reason
    script.clear()
    script.send_keys("echo bad; exit 3\n")
    find("args").clear()
    find("submit").click()
    _wait(lambda: find("jobid").text != job, what="second job")
    _wait(lambda: find("state").text == "failed", what="the job to fail")
    assert "status 3" in find("reason").text
    # a wrong token: a one-line error on the page, no job
    find("token").clear()
    find("token").send_keys("wrong-token")
    find("submit").click()
    _wait(lambda: find("error").text == "unknown token", what="the token error")
