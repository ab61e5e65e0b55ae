# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""The HTML page of `shoal serve`, driven in headless Chromium (Debian's chromium, through
Playwright's Python package pointed at it: no browser download): submit a script, watch it
finish, download a result."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.script.script_helpers import needs_nco, write_model
from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

CHROMIUM = shutil.which("chromium")
pytestmark = [
    needs_aiohttp, needs_sandbox, pytest.mark.timeout(180),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/setup.sh)"),
]


@pytest.fixture
def page():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(accept_downloads=True)
            yield ctx.new_page()
        finally:
            browser.close()


@needs_nco
def test_page_submits_watches_and_downloads(serve, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    srv = serve()
    write_model(srv.data / "sresalb_m0.nc", 0)
    root = srv.json("GET", "/api/v1/data")["root"]
    upload = tmp_path / "extra.txt"
    upload.write_text("uploaded line\n")
    page.goto(srv.url + "/")
    expect(page).to_have_title("shoal serve")
    page.fill("#token", srv.tokens["alice"])
    # the data listing shows the paths scripts use
    page.click("#showdata")
    expect(page.locator("#data")).to_contain_text(f"{root}/sresalb_m0.nc")
    page.fill("#script", "#!/bin/bash\nset -e\nncra -O $1/sresalb_m0.nc mean.nc\n"
                         "ncks -H -v tas mean.nc > mean.txt\ncat extra.txt\n"
                         "for i in 1 2 3; do echo step $i; sleep 0.2; done\n")
    page.fill("#args", root)
    page.set_input_files("#inputs", str(upload))
    page.click("#submit")
    expect(page.locator("#jobid")).not_to_be_empty()
    job = page.locator("#jobid").inner_text()
    expect(page.locator("#state")).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#error")).to_be_empty()
    log = page.locator("#log")
    expect(log).to_contain_text("[shoal serve] job succeeded")
    for text in ("uploaded line", "step 3"):
        expect(log).to_contain_text(text)
    links = page.locator("#outputs a.download")
    expect(links).to_have_count(3)
    assert sorted(links.all_inner_texts()) == ["extra.txt", "mean.nc", "mean.txt"]
    with page.expect_download() as dl:
        page.click("#outputs a.download >> text=mean.txt")
    got = tmp_path / "got.txt"
    dl.value.save_as(got)
    assert dl.value.suggested_filename == "mean.txt"
    _, _, expected = srv.request("GET", f"/api/v1/jobs/{job}/outputs/mean.txt")
    assert got.read_bytes() == expected and b"tas" in expected
    # the zip of all outputs
    with page.expect_download() as dl:
        page.click("#archive")
    assert dl.value.suggested_filename == f"job-{job}.zip"
    # a failing job shows its reason
    page.fill("#script", "echo bad; exit 3\n")
    page.fill("#args", "")
    page.click("#submit")
    expect(page.locator("#jobid")).not_to_have_text(job)
    expect(page.locator("#state")).to_have_text("failed", timeout=60_000)
    expect(page.locator("#reason")).to_contain_text("status 3")
    # a wrong token: a one-line error on the page, no job
    page.fill("#token", "wrong-token")
    page.click("#submit")
    expect(page.locator("#error")).to_have_text("unknown token")
