"""A throwaway PostgreSQL server for tests: initdb into a temp folder, a private loopback port.

Needs Debian's `postgresql` (.ci/install-cluster-tools.sh installs it): initdb and pg_ctl from
PATH or /usr/lib/postgresql/<version>/bin. PostgreSQL refuses to run as root, so as root the
server runs as `nobody` through runuser, in a folder nobody owns. It listens on 127.0.0.1 only
(its socket folder is the temp folder too) and trusts local connections: nothing outside this
machine can reach it. stop() ends it (pg_ctl stop, fast) and the folder goes with the test's tmp.

Manual use, for debugging:
    python -m tests.support.postgres_server /tmp/cb-pg    # prints the URL, stops on Enter
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

USER = "commbench"


class PostgresUnavailable(RuntimeError):
    """The server did not come up; the message says which step failed and quotes its output."""


def tool(name: str) -> str | None:
    """initdb or pg_ctl: on PATH, else the newest /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server; url(db) names a database on it, create_database() makes a fresh one."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []

    def start(self) -> Server:
        initdb, pg_ctl = tool("initdb"), tool("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise PostgresUnavailable("no initdb/pg_ctl (Debian's postgresql package; .ci/install-cluster-tools.sh)")
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # PostgreSQL refuses root: the server runs as nobody, in a folder it owns
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root without runuser: cannot start PostgreSQL as another user")
            shutil.chown(self.root, "nobody", "nogroup")
            self.as_user = ["runuser", "-u", "nobody", "--"]
        self._run([initdb, "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"], "initdb")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run([pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start"], "start")
        return self

    def _run(self, argv: list[str], step: str) -> None:
        proc = subprocess.run([*self.as_user, *argv], capture_output=True, text=True, timeout=120, cwd=self.root)
        if proc.returncode != 0:
            log = (self.root / "log").read_text()[-1500:] if (self.root / "log").exists() else ""
            raise PostgresUnavailable(f"PostgreSQL {step} failed ({proc.returncode}): {proc.stderr[-1500:]} {log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        pg_ctl = tool("pg_ctl")
        if pg_ctl and (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self.as_user, pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )


if __name__ == "__main__":
    server = Server(Path(sys.argv[1])).start()
    print(server.url(), flush=True)
    try:
        input()
    finally:
        server.stop()
