"""Where a run's metrics go (commbench/results/metrics.py makes the text): a file for
node_exporter's textfile collector (--metrics-textfile), written whole under a temporary name and
renamed (the collector never reads half a file), and a Prometheus Pushgateway (--metrics-push).

A push that fails (the gateway unreachable, a refusal) is one warning and its own exit code
(ExitCode.UNDELIVERED, 6): every row is in the CSV and the history already, and
`commbench export prometheus RUN.csv --push URL` sends them again. A URL's password is sent as
HTTP basic authentication and never printed (commbench/redact.py)."""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from commbench.errors import UserError, warn
from commbench.redact import redact
from commbench.results.measurement import Measurement
from commbench.results.metrics import exposition, host_labels
from commbench.results.paths import target_kind, write_atomically
from commbench.results.row_outputs import RowOutput
from commbench.results.writer import cells

PUSH_TIMEOUT_S = 10.0  # a gateway that does not answer in this time is reported, never waited on
TEXTFILE_NAME = "commbench.prom"  # the file a --metrics-textfile folder gets
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def textfile_path(requested: str, writer: bool = True) -> Path:
    """The .prom file --metrics-textfile names (a folder: commbench.prom in it). node_exporter reads
    only *.prom files in a folder that exists: anything else is refused in one line, before a run.
    writer: this process writes it (the folder checked); a launched rank other than 0 checks the name only."""
    path = Path(requested)
    if not writer:
        return path / TEXTFILE_NAME if requested.endswith(("/", os.sep)) else path
    if requested.endswith(("/", os.sep)) or target_kind(path, "--metrics-textfile") == "folder":
        path = path / TEXTFILE_NAME
    if path.suffix != ".prom":
        raise UserError(
            f"--metrics-textfile {requested}: node_exporter's textfile collector reads only *.prom files; "
            f"name it {path.with_suffix('.prom').name}"
        )
    folder = path.parent
    if target_kind(folder, "--metrics-textfile") != "folder":
        raise UserError(
            f"--metrics-textfile {requested}: the folder {folder} does not exist; give the folder "
            "node_exporter's --collector.textfile.directory names"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--metrics-textfile {requested}: cannot write in {folder}: permission denied")
    return path


def push_target(url: str, hostname: str) -> tuple[str, dict[str, str]]:
    """The URL to PUT to and its headers: the gateway's group for this host (job commbench,
    instance the host) unless the URL names its own (/metrics/job/...); a user:password in the URL
    becomes a basic-authentication header, out of the URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--metrics-push {redact(url)}: give the Pushgateway's http:// or https:// URL")
    headers = {"Content-Type": EXPOSITION_TYPE}
    if parts.username is not None:
        secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc += f":{parts.port}" if parts.port else ""
    path = parts.path.rstrip("/")
    if "/metrics/job/" not in path:
        path += "/metrics/job/commbench/instance/" + urllib.parse.quote(hostname, safe="")
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, parts.query, "")), headers


def push(url: str, text: str, hostname: str) -> str | None:
    """PUT the metrics to the gateway (replacing its group); None when it took them, else why not,
    in one line that names the gateway without its secret."""
    target, headers = push_target(url, hostname)
    request = urllib.request.Request(target, data=text.encode(), headers=headers, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=PUSH_TIMEOUT_S) as answer:
            answer.read(4096)
    except urllib.error.HTTPError as exc:
        said = exc.read(300).decode("utf-8", "replace").strip().splitlines()
        return f"the Pushgateway {redact(url)} refused the metrics: HTTP {exc.code}{': ' + said[0] if said else ''}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot push the metrics to {redact(url)}: {redact(str(reason))}"
    return None


def deliver(text: str, textfile: Path | None, push_url: str | None, hostname: str) -> bool:
    """Write the textfile and push; False when the push failed (one warning says why)."""
    delivered = True
    if textfile is not None:
        try:
            write_atomically(textfile, text)
        except UserError as exc:  # the folder went away, or the disk is full, since the run was planned
            warn(f"{exc.format_message()}; the results are in the CSV: `commbench export prometheus` writes them")
            delivered = False
    why = push(push_url, text, hostname) if push_url is not None else None
    if why is not None:
        warn(f"{why}; the results are in the CSV: `commbench export prometheus CSV --push URL` sends them again")
    return delivered and why is None


class MetricsRows(RowOutput):
    """A run's rows as metrics, delivered once the run completes (a run stopped part way delivers
    none: a dashboard shows whole runs, and the CSV keeps what was measured)."""

    def __init__(self, textfile: Path | None, push_url: str | None) -> None:
        self.textfile, self.push_url = textfile, push_url
        self.rows: list[dict[str, Any]] = []

    def add(self, row: Mapping[str, Any], m: Measurement | None) -> None:
        self.rows.append(cells(dict(row)))  # as the CSV holds it: the metrics and the CSV say one number

    def finish(self) -> bool:
        if not self.rows:
            return True
        host = host_labels(self.rows[0])["hostname"]
        return deliver(exposition(self.rows), self.textfile, self.push_url, host)
