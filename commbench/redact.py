"""Secrets out of everything commbench records or prints: the one rule for what is a secret, and the
one redaction every command line, URL, variable and message goes through before it reaches a CSV,
the history, a report, a chart or a log line.

A name is a secret's when it holds, in any case, one of SECRET_WORDS (PASSWORD, PASSWD, PWD,
SECRET, TOKEN, KEY, CREDENTIAL, AUTH) anywhere in it: `NCCL_API_KEY`, `AWS_SECRET_ACCESS_KEY`,
`sslpassword`, `auth_token`. The rule hides more than it must (`NCCL_IB_PKEY`, `HOROVOD_AUTOTUNE`)
rather than guess which name is harmless. Three shapes carry a secret:

- an environment variable so named (its value recorded as `<hidden>`: redact_variable);
- a parameter so named in a URL's query, a libpq `key=value` connection string or a command line
  (`password=`, `sslpassword=`, `token=`: its value shown as `***`);
- a URL's userinfo (`scheme://user:PASSWORD@host`, where the password may itself hold `@`, `/`
  or `?`: the host follows the word's last `@`), shown as `***`.

A database password belongs in PGPASSWORD, a libpq service or password file, or $COMMBENCH_HISTORY
(docs/history.md); one typed anyway is hidden wherever it would be recorded.
"""

from __future__ import annotations

import re

HIDDEN = "***"  # a password's place in a URL, a parameter or a command line
HIDDEN_VARIABLE = "<hidden>"  # a secret variable's value in a host record (<stem>.env.json, the history)
SECRET_WORDS = ("PASSWORD", "PASSWD", "PWD", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "AUTH")

_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# scheme://user: (a name where no scheme character precedes it), then the password up to the word's
# LAST '@', so that a raw '@', '/' or '?' in a password cannot leave its tail outside the redaction
# (an '@' further on hides more, never less). Words are found first, so the scan stays linear.
_URL_USER = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s'\"?#]*:")
_WORD = re.compile(r"[^\s'\"]+")
# A parameter: `name=` (libpq allows spaces around the `=`) where no name character precedes the name,
# and its value, quoted as libpq quotes ('two words', with \' inside) or up to a separator. Only a
# secret name's value is read (_hide_parameters), so the scan is linear in the text whatever it holds.
_NAME = re.compile(r"(?<![\w.-])(?P<name>[\w.-]+)\s*=\s*")
_VALUE = re.compile(r"'(?:[^'\\]|\\.)*'?|[^&\s'\"#;]*")


def is_secret_name(name: str) -> bool:
    """Whether a variable or parameter of this name holds a secret (the module's rule)."""
    return _SECRET_NAME.search(name) is not None


def redact(text: str, *, word: bool = False) -> str:
    """The text with every password in a URL and every secret-named parameter's value as ***;
    `word`: the text is one word of a command line, so a password in it may hold a space."""
    if "@" in text and "://" in text:
        text = _hide_userinfo(text) if word else _WORD.sub(lambda found: _hide_userinfo(found[0]), text)
    return _hide_parameters(text)


def redact_variable(name: str, value: str) -> str:
    """An environment variable's value as recorded: <hidden> for a secret's name, else the value
    with any password in it (a URL's) hidden."""
    return HIDDEN_VARIABLE if is_secret_name(name) else redact(value)


def _hide_userinfo(word: str) -> str:
    """The word with the password of its URL (from `scheme://user:` to the last '@') as ***."""
    at = word.rfind("@")
    user = _URL_USER.search(word, 0, at) if at > 0 else None
    return word if user is None else word[: user.end()] + HIDDEN + word[at:]


def _hide_parameters(text: str) -> str:
    """Each secret-named parameter's value as ***; a parameter inside a value hidden already is
    skipped, one inside any other value is judged on its own (`--history=...?password=`)."""
    parts, done = [], 0
    for name in _NAME.finditer(text):
        if name.start() < done or not is_secret_name(name["name"]):
            continue
        value = _VALUE.match(text, name.end())
        end = value.end() if value else name.end()
        parts += [text[done : name.end()], HIDDEN if end > name.end() else ""]
        done = end
    return "".join(parts) + text[done:]


def redact_argv(argv: list[str]) -> list[str]:
    """Each word of a command line redacted on its own (before it is joined and quoted, so that a
    password holding a space or a quote cannot split across words and escape)."""
    return [redact(word, word=True) for word in argv]
