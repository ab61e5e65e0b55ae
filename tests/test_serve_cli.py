"""`shoal serve` and `shoal submit` command lines: bad tokens files, options and URLs are one
line and exit status 2; `--new-token` makes a working tokens file entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.service.tokens import Tokens, TokensError, digest, parse_size
from tests.script.script_helpers import REPO
from tests.test_serve_common import needs_aiohttp


def _shoal(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), "SHOAL_TOKEN": ""})


def _one_error_line(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.parametrize("text, words", [
    ("[tokens.a]\nsha256 = 'abc'\n", ["[tokens.a]", "64 hex digits"]),
    ("[tokens.a]\nsha256 = '" + "0" * 64 + "'\ntoken = 'x' \n", ["exactly one"]),
    ("[tokens.a]\ntoken = 'short'\n", ["16 characters"]),
    ("[tokens.a]\nsha256 = '" + "0" * 64 + "'\nmax_jobs = 0\n", ["max_jobs"]),
    ("[tokens.a]\nsha256 = '" + "0" * 64 + "'\nmax_output = 'lots'\n", ["max_output"]),
    ("[tokens.a]\nsha256 = '" + "0" * 64 + "'\ncolor = 1\n", ["unknown key 'color'"]),
    ("[tokens.a]\nsha256 = '" + "0" * 64 + "'\n[tokens.b]\nsha256 = '" + "0" * 64 + "'\n",
     ["[tokens.b]", "same token"]),
    ("tokens = 3\n", ["no [tokens.NAME]"]),
    ("[tokens.a\n", ["not valid TOML"]),
])
def test_bad_tokens_files(tmp_path: Path, text: str, words: list[str]) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text(text)
    os.chmod(f, 0o600)
    with pytest.raises(TokensError) as exc:
        Tokens.load(str(f))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(f))
    for w in words:
        assert w in msg


def test_plain_tokens_need_a_private_file(tmp_path: Path) -> None:
    f = tmp_path / "tokens.toml"
    f.write_text("[tokens.a]\ntoken = 'abcdefghijklmnopqrstuvwxyz'\nmax_output = '2G'\n")
    os.chmod(f, 0o644)
    with pytest.raises(TokensError, match="chmod 600"):
        Tokens.load(str(f))
    os.chmod(f, 0o600)
    toks = Tokens.load(str(f))
    assert toks.check("abcdefghijklmnopqrstuvwxyz").max_output == 2 << 30  # type: ignore[union-attr]
    assert toks.check("abcdefghijklmnopqrstuvwxyZ") is None
    assert toks.check("") is None and toks.check(None) is None
    assert parse_size("1.5K") == 1536 and parse_size("512MiB") == 512 << 20


@needs_aiohttp
def test_new_token_and_cli_errors(tmp_path: Path) -> None:
    r = _shoal("serve", "--data", str(tmp_path), "--new-token", "carol")
    assert r.returncode == 0, r.stderr
    token = r.stdout.split("token: ", 1)[1].split()[0]
    table = r.stdout.split("# add to the tokens file:\n", 1)[1]
    f = tmp_path / "tokens.toml"
    f.write_text(table)
    os.chmod(f, 0o644)  # digests only: may be readable
    found = Tokens.load(str(f)).check(token)
    assert found is not None and found.name == "carol" and found.sha256 == digest(token)
    _one_error_line(_shoal("serve", "--data", str(tmp_path / "none")), "not a directory")
    _one_error_line(_shoal("serve", "--data", str(tmp_path), "--listen", "localhost"),
                    "HOST:PORT")
    _one_error_line(_shoal("serve", "--data", str(tmp_path), "--max-upload", "big",
                           "--jobs", str(tmp_path / "j")), "--max-upload")
    bad = tmp_path / "bad.toml"
    bad.write_text("[tokens.x]\n")
    _one_error_line(_shoal("serve", "--data", str(tmp_path), "--tokens", str(bad),
                           "--jobs", str(tmp_path / "j")), "exactly one")
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    _one_error_line(_shoal("submit", "http://127.0.0.1:9/", str(script)), "no token")
    _one_error_line(_shoal("submit", "--token=abc", "ftp://x/", str(script)), "URL")
    _one_error_line(_shoal("submit", "--token=abc", "http://127.0.0.1:9/", str(script)),
                    "cannot reach")
    _one_error_line(_shoal("submit", "--token=abc", "http://127.0.0.1:9/",
                           str(tmp_path / "nope.sh")), "no such file")
