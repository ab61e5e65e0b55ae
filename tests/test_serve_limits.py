# ruff: noqa: F811  (the `serve` fixture is imported, then named as a parameter)
"""Per-token request rates (token buckets, 429 with Retry-After) and token expiry (401 with a
one-line reason): the tokens file's keys, and a real `shoal serve` answering them."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shoal.service.tokens import RateLimiter, Tokens, TokensError, parse_rate
from tests.script.script_helpers import REPO
from tests.test_serve_common import needs_aiohttp, needs_sandbox, serve  # noqa: F401

SHA = "sha256 = '" + "0" * 64 + "'\n"


def _load(tmp_path: Path, text: str) -> Tokens:
    f = tmp_path / "tokens.toml"
    f.write_text(text)
    os.chmod(f, 0o600)
    return Tokens.load(str(f))


def test_rates_expiry_and_defaults_in_the_tokens_file(tmp_path: Path) -> None:
    t = _load(tmp_path, "[defaults]\nrate = '120/min'\nmax_jobs = 1\n"
                        f"[tokens.a]\n{SHA}burst = 5\nexpires = 2020-01-31\n"
                        "[tokens.b]\nsha256 = '" + "1" * 64 + "'\nrate = 0.5\nmax_jobs = 3\n"
                        "expires = 2999-01-01T12:00:00+01:00\n"
                        "[tokens.c]\nsha256 = '" + "2" * 64 + "'\nexpires = '2999-01-01T11:00Z'\n")
    a, b, c = t.tokens
    assert (a.rate, a.burst, a.max_jobs) == (2.0, 5, 1)
    assert (b.rate, b.burst, b.max_jobs) == (0.5, 1, 3)
    assert a.expired() and not b.expired()
    utc = dt.timezone.utc
    assert a.expires == dt.datetime(2020, 1, 31, tzinfo=utc).timestamp()  # its start, UTC
    assert b.expires == c.expires == dt.datetime(2999, 1, 1, 11, tzinfo=utc).timestamp()
    assert c.rate == 2.0 and c.burst == 2
    assert [parse_rate(r) for r in ("10/s", "600/min", "36/h", 4)] == [10.0, 10.0, 0.01, 4.0]
    # the bucket: `burst` at once, then one every 1/rate seconds
    lim = RateLimiter()
    assert [lim.take(a, now=100.0) for _ in range(6)] == [0.0] * 5 + [0.5]
    assert lim.take(a, now=100.25) == pytest.approx(0.25)
    assert lim.take(a, now=100.5) == 0.0
    assert lim.take(b, now=100.0) == 0.0 and lim.take(b, now=100.0) == 2.0  # buckets per token


@pytest.mark.parametrize("text, words", [
    (f"[tokens.a]\n{SHA}rate = 'fast'\n", ["[tokens.a]", "rate 'fast'", "10/s"]),
    (f"[tokens.a]\n{SHA}rate = 0\n", ["[tokens.a]", "more than 0"]),
    (f"[tokens.a]\n{SHA}rate = '5/fortnight'\n", ["rate"]),
    (f"[tokens.a]\n{SHA}burst = 3\n", ["burst without a rate"]),
    (f"[tokens.a]\n{SHA}rate = 1\nburst = 0\n", ["burst must be a whole number"]),
    (f"[tokens.a]\n{SHA}expires = 'soon'\n", ["[tokens.a]", "expires 'soon'", "a date"]),
    (f"[defaults]\nrate = 'x'\n[tokens.a]\n{SHA}", ["[defaults]", "rate 'x'"]),
    (f"[defaults]\nexpires = 2020-01-01\n[tokens.a]\n{SHA}", ["[defaults]", "'expires'"]),
    (f"[limits]\nrate = 1\n[tokens.a]\n{SHA}", ["unknown table or key 'limits'"]),
])
def test_bad_rates_and_expiry_are_one_line(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(TokensError) as exc:
        _load(tmp_path, text)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path)), msg
    for w in words:
        assert w in msg, (w, msg)


@needs_aiohttp
@needs_sandbox
@pytest.mark.timeout(120)
def test_service_answers_429_with_retry_after_and_401_when_expired(serve) -> None:
    srv = serve(users={"slow": {"rate": "30/min", "burst": 3}, "free": {},
                       "one": {"rate": "120/min", "burst": 1},
                       "old": {"expires": "2021-06-01T00:00:00Z"}})
    info = srv.json("GET", "/api/v1/info", token="slow")
    assert info["quota"]["rate"] == 0.5 and info["quota"]["burst"] == 3
    codes = [srv.request("GET", "/api/v1/jobs", token="slow")[0] for _ in range(2)]
    assert codes == [200, 200]  # with /info: the burst of 3 is spent
    status, hdrs, body = srv.request("GET", "/api/v1/jobs", token="slow")
    # (one request every 2 s: slow enough that a loaded machine does not refill the bucket)
    assert status == 429 and hdrs["retry-after"] in ("1", "2"), (status, hdrs, body)
    err = json.loads(body)["error"]
    assert "\n" not in err and "rate limit: token 'slow'" in err and "retry in" in err, err
    # refused requests spend nothing; another token has its own bucket
    assert srv.request("GET", "/api/v1/jobs", token="slow")[0] == 429
    assert all(srv.request("GET", "/api/v1/jobs", token="free")[0] == 200 for _ in range(20))
    time.sleep(2.1)  # one request's worth refilled
    assert srv.request("GET", "/api/v1/jobs", token="slow")[0] == 200
    # an expired token: 401 with the reason, whatever it asks
    for method, path in (("GET", "/api/v1/jobs"), ("POST", "/api/v1/jobs")):
        status, hdrs, body = srv.request(method, path, token="old", body=b"{}",
                                         headers={"Content-Type": "application/json"})
        err = json.loads(body)["error"]
        assert status == 401 and err == ("token 'old' expired at 2021-06-01T00:00:00Z: ask the "
                                         "service's operator for a new one"), (status, err)
        assert "expired" in hdrs["www-authenticate"]

    # `shoal submit` waits Retry-After and sends again: a token of one request at a time (2 a
    # second) still submits, follows, downloads
    (srv.tmp / "job.sh").write_text("echo hi > hi.txt\necho said hi\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "shoal", "submit", f"--token={srv.tokens['one']}",
                        "-o", str(srv.tmp / "got"), srv.url, str(srv.tmp / "job.sh")],
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "said hi" in r.stdout and (srv.tmp / "got" / "hi.txt").read_text() == "hi\n"
    assert srv.request("GET", "/api/v1/jobs", token="one")[0] == 429  # its bucket is spent
    assert time.monotonic() - t0 < 90
