"""Secrets never leave commbench: the one redaction every recorded command line, URL and message
goes through (commbench/redact.py), on the shapes a password takes."""

from __future__ import annotations

import shlex

import pytest

from commbench.redact import redact, redact_argv


@pytest.mark.parametrize(
    ("given", "shown", "secret"),
    [
        ("postgresql://cb:PW@127.0.0.1:5432/db", "postgresql://cb:***@127.0.0.1:5432/db", "PW"),
        # a raw '@' in the password: its tail must not pass for the host
        ("postgresql://cb:Se@cret@host/db", "postgresql://cb:***@host/db", "cret"),
        ("postgresql://cb:a/b?c@host/db", "postgresql://cb:***@host/db", "a/b?c"),
        (
            "postgresql://cb@host/db?sslpassword=K3y&sslmode=require",
            "postgresql://cb@host/db?sslpassword=***&sslmode=require",
            "K3y",
        ),
        ("postgresql://cb@host/db?password=hunter2", "postgresql://cb@host/db?password=***", "hunter2"),
        ("host=h password=hunter2 dbname=x", "host=h password=*** dbname=x", "hunter2"),
        ("--history=postgresql://u:p4ss@h/d", "--history=postgresql://u:***@h/d", "p4ss"),
    ],
)
def test_every_shape_of_a_password_is_hidden(given, shown, secret):
    assert redact(given) == shown
    assert secret not in redact(given)


def test_what_holds_no_secret_is_left_as_it_is():
    for text in ("commbench sweep --op all_gather -o results/a.csv", "postgresql://cb@host:5432/db", "a:b c@d"):
        assert redact(text) == text


def test_a_password_with_a_space_is_hidden_before_the_command_line_is_quoted():
    argv = ["commbench", "sweep", "--history", "postgresql://cb:two words@host/db"]
    joined = shlex.join(redact_argv(argv))
    assert "two" not in joined and "words" not in joined and "postgresql://cb:***@host/db" in joined
