"""Secrets out of everything commbench records or prints: the one redaction every command line, URL
and message goes through before it reaches a CSV, the history, a report, a chart or a log line.

A database password belongs in PGPASSWORD, a libpq service or password file, or $COMMBENCH_HISTORY
(docs/history.md); one typed into a URL or a command line is replaced by `***` wherever it would
be recorded. Two shapes carry one: a URL's userinfo (`scheme://user:PASSWORD@host`, where the
password may itself hold `@`, `/` or `?`: the host follows the word's last `@`), and a
parameter whose name says it is one (`password=`, `sslpassword=`, `token=`, `secret=`, in a URL's
query or a libpq `key=value` string).
"""

from __future__ import annotations

import re

HIDDEN = "***"

# scheme://userinfo@host: the userinfo runs to the word's LAST '@', so a raw '@', '/' or '?' in a
# password cannot leave its tail outside the redaction (an '@' further on hides more, never less).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/\s'\"?#]*):(?P<secret>[^\s'\"]*)@")
_PARAMETER = re.compile(r"(?i)(?P<key>\b[\w.-]*(?:password|passwd|pwd|secret|token)=)(?P<value>[^&\s'\"#;]*)")


# One word of a command line is one unit: there a password's userinfo may hold spaces too.
_USERINFO_WORD = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/\s'\"]*):(?P<secret>.*)@")


def redact(text: str, *, word: bool = False) -> str:
    """The text with every password in a URL and every secret-named parameter's value as ***;
    `word`: the text is one word of a command line, so a password in it may hold a space."""
    text = (_USERINFO_WORD if word else _USERINFO).sub(_hide_userinfo, text)
    return _PARAMETER.sub(lambda m: m["key"] + (HIDDEN if m["value"] else ""), text)


def _hide_userinfo(match: re.Match[str]) -> str:
    return f"{match['scheme']}{match['user']}:{HIDDEN}@"


def redact_argv(argv: list[str]) -> list[str]:
    """Each word of a command line redacted on its own (before it is joined and quoted, so that a
    password holding a space or a quote cannot split across words and escape)."""
    return [redact(word, word=True) for word in argv]
