"""The report's hosts section: every run's hosts from its <stem>.env.json, and how they differ."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from commbench.errors import UserError
from commbench.provenance import LABELS, env_path, read_env, shown


def host_sections(frame: pd.DataFrame) -> list[str]:
    """HTML: per run with an environment file, a table of its hosts (one row each), their variables,
    the differences between them, and the fingerprint; nothing for runs recorded without one."""
    parts: list[str] = []
    for run, rows in frame.groupby("run", sort=False):
        first = rows.iloc[0]
        csv = Path(first["source"])
        path = csv.with_name(first["env_file"]) if first.get("env_file") else env_path(csv)
        if not path.is_file():
            continue
        try:
            document = read_env(path)
        except UserError as exc:
            parts.append(f"<p>{html.escape(str(run))}: {html.escape(exc.format_message())}</p>")
            continue
        hosts = document["hosts"]
        table = pd.DataFrame([{label: shown(key, r) for key, label in LABELS.items() if key in r} for r in hosts])
        names = sorted({n for r in hosts for n in (r.get("variables") or {})})
        variables = pd.DataFrame(
            [{"host": r.get("host"), **{n: (r.get("variables") or {}).get(n, "") for n in names}} for r in hosts]
        )
        parts.append(
            f"<h3>{html.escape(str(run))}: {len(hosts)} host(s), fingerprint "
            f"<code>{html.escape(str(document.get('fingerprint')))}</code></h3>"
        )
        parts.append(table.to_html(index=False, border=0))
        if names:
            parts.append(variables.to_html(index=False, border=0))
        for line in document.get("differences", []):
            parts.append(f"<p><b>The hosts differ:</b> {html.escape(line)}</p>")
        for record in hosts:
            if record.get("topology"):
                parts.append(
                    f"<p>nvidia-smi topo -m on {html.escape(str(record.get('host')))}:</p>"
                    f"<pre>{html.escape(str(record['topology']))}</pre>"
                )
    return ["<h2>Hosts</h2>", *parts] if parts else []
