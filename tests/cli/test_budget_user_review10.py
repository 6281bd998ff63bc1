"""Review 10, finding 10c: ``streamdp budget grant "" …`` and a 300-character user were accepted, creating budget
entries for ids that the event parser always dead-letters (``bad_user``: 1..MAX_USER_LEN characters). ``grant``
now applies the parser's rule (the constant is imported from ``streamdp.input.events``, not repeated)."""

from __future__ import annotations

import json

import pytest

from streamdp.cli.main import main
from streamdp.input.events import MAX_USER_LEN, BadEvent, parse_event


def _grant(store, user, capsys):
    try:
        rc = main(["budget", "grant", user, "--rho", "1", "--yes", "--create", "--store", str(store)])
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr()


@pytest.mark.parametrize("user,message", [
    ("", "got ''"),
    ("x" * (MAX_USER_LEN + 1), f"({MAX_USER_LEN + 1} characters)"),
    ("u" * 300, "(300 characters)"),
    ("\udcff", "must be valid UTF-8"),  # a non-UTF-8 byte in argv
])
def test_grant_refuses_a_user_no_event_can_name(tmp_path, capsys, user, message):
    store = tmp_path / "st.json"
    rc, out = _grant(store, user, capsys)
    assert rc == 2
    assert out.err.startswith("streamdp budget grant: error: argument user: a user id must")
    assert message in out.err and len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert f"1..{MAX_USER_LEN} characters" in out.err or "UTF-8" in out.err
    assert not store.exists()  # nothing written


@pytest.mark.parametrize("user", ["u", "x" * MAX_USER_LEN, "N14228", "ü-user", "12345"])
def test_grant_takes_every_user_the_event_parser_takes(tmp_path, capsys, user):
    assert parse_event(json.dumps({"user": user, "ts": 1.5e9}).encode())[0] == user  # the parser takes it …
    store = tmp_path / "st.json"
    rc, out = _grant(store, user, capsys)
    assert rc == 0, out.err  # … and so does grant
    assert main(["budget", "show", user, "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["user"] == user


def test_the_rule_is_the_parsers(tmp_path, capsys):
    """The parser dead-letters exactly the lengths grant refuses."""
    for n, ok in ((0, False), (1, True), (MAX_USER_LEN, True), (MAX_USER_LEN + 1, False)):
        try:
            parse_event(json.dumps({"user": "a" * n, "ts": 1.5e9}).encode())
            parsed = True
        except BadEvent as e:
            assert e.reason == "bad_user"
            parsed = False
        assert parsed == ok
        rc, _ = _grant(tmp_path / f"st{n}.json", "a" * n, capsys)
        assert (rc == 0) == ok
