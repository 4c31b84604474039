"""Secrets never leave commbench: the one redaction every recorded command line, URL and message
goes through (commbench/redact.py), on the shapes a password takes."""

from __future__ import annotations

import shlex

import pytest

from commbench.redact import SECRET_WORDS, is_secret_name, redact, redact_argv, redact_variable


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
        # libpq's key=value form: spaces around '=', a quoted value holding a space and a quote
        ("host=h password = 'two w\\'ords' dbname=x", "host=h password = *** dbname=x", "ords"),
        ("host=h password='Se@cret 9' dbname=x", "host=h password=*** dbname=x", "cret"),
        # a secret parameter inside another parameter's value, and a token ending in base64's '='
        (
            "--history=postgresql://h/db?password=x1y2&token=abc==",
            "--history=postgresql://h/db?password=***&token=***",
            "x1y2",
        ),
        ("NCCL_API_KEY=k3y commbench sweep", "NCCL_API_KEY=*** commbench sweep", "k3y"),
        ("sslkey=/home/u/.key auth_header=Bearer", "sslkey=*** auth_header=***", "Bearer"),
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


@pytest.mark.parametrize("word", SECRET_WORDS)
def test_every_secret_word_names_a_secret_in_any_case_and_as_part_of_a_name(word):
    for name in (word, word.lower(), f"NCCL_{word}", f"ssl{word.lower()}", f"MY_{word.title()}_FILE"):
        assert is_secret_name(name), name
        assert redact_variable(name, "s3cr3t") == "<hidden>"
        assert "s3cr3t" not in redact(f"{name}=s3cr3t")


def test_transport_variables_are_no_secrets_and_a_url_in_a_value_loses_its_password():
    for name in ("NCCL_IB_HCA", "NCCL_DEBUG", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME"):
        assert not is_secret_name(name) and redact_variable(name, "mlx5_0") == "mlx5_0"
    assert redact_variable("NCCL_DEBUG_FILE", "postgresql://u:pw9@h/d") == "postgresql://u:***@h/d"
