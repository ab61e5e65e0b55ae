"""Differential tests: every script of ``tests/script/corpus`` run under bash and under
`shoal script` in fresh identical directories must leave the same files, print the same stdout,
agree on whether stderr is empty and exit with the same status; or, for scripts marked
``# expect: refused``, be refused with one line naming ``file:line``.

Scripts that differ today are listed in ``corpus/KNOWN_FAILURES`` (``name.sh  class  reason``).
Those of a ``refused...`` class must be refused cleanly (exit 2, one line naming ``file:line``
and ending "not supported; run it with bash", no file changed): never a silent difference. Any
other class runs as a strict xfail. Either way, once the compiler handles the script the test
fails until its line is removed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from difftools import CORPUS, directives, run_pair
from script_helpers import needs_nco

pytestmark = needs_nco

SCRIPTS = sorted(CORPUS.glob("*.sh"))


def known_failures() -> dict[str, tuple[str, str]]:
    """``name -> (class, reason)`` from ``corpus/KNOWN_FAILURES``."""
    out: dict[str, tuple[str, str]] = {}
    path = CORPUS / "KNOWN_FAILURES"
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.strip() and not line.startswith("#"):
            name, cls, *reason = line.split(None, 2)
            out[name] = (cls, reason[0] if reason else "")
    return out


KNOWN = known_failures()


def _param(p: Path):  # type: ignore[no-untyped-def]
    if p.name in KNOWN and not KNOWN[p.name][0].startswith("refused"):
        cls, reason = KNOWN[p.name]
        return pytest.param(p, id=p.name, marks=pytest.mark.xfail(
            strict=True, reason=f"{cls}: {reason}"))
    return pytest.param(p, id=p.name)


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("datasets")


@pytest.mark.parametrize("script", [_param(p) for p in SCRIPTS])
def test_corpus_script_matches_bash(script: Path, tmp_path: Path, data_cache: Path) -> None:
    refused = KNOWN.get(script.name, ("", ""))[0].startswith("refused")
    problems = run_pair(tmp_path, script.name, script.read_text(), data_cache, refused=refused)
    assert not problems, "\n".join(problems)


def test_corpus_is_complete_and_described() -> None:
    assert len(SCRIPTS) >= 150, f"only {len(SCRIPTS)} corpus scripts"
    for p in SCRIPTS:
        head = []
        for line in p.read_text().splitlines():
            if not line.startswith("#"):
                break
            head.append(line)
        described = [x for x in head if not x.startswith("#!")
                     and not re.match(r"#\s*(args|data|expect|stderr):", x)]
        assert described, f"{p.name}: no header comment saying what it exercises"
        d = directives(p.read_text())
        assert d.expect in ("same", "refused") and d.stderr in ("empty", "exact"), p.name
    names = {p.name for p in SCRIPTS}
    stale = sorted(set(KNOWN) - names)
    assert not stale, f"KNOWN_FAILURES names scripts not in the corpus: {stale}"
