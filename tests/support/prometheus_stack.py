"""A private Prometheus, Pushgateway and node_exporter (its textfile collector only) for tests, on
127.0.0.1 ports chosen here, their data in a temp folder: what a cluster team runs, for real.

Needs Debian's prometheus, prometheus-pushgateway and prometheus-node-exporter
(.ci/install-cluster-tools.sh installs them; missing() says which are absent, for a clean skip).
Prometheus scrapes both every second (the Pushgateway with honor_labels, as its docs ask), and
query() asks its HTTP API (/api/v1/query) as a dashboard would. stop() ends the three.

Manual use, for debugging:
    python -m tests.support.prometheus_stack /tmp/cb-prom    # prints the URLs, stops on Enter
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BINARIES = ("prometheus", "prometheus-pushgateway", "prometheus-node-exporter", "promtool")
SCRAPE_S = 1


class StackUnavailable(RuntimeError):
    """A part did not come up; the message names it and quotes its log."""


def missing() -> list[str]:
    """The binaries this stack needs that are not installed."""
    return [b for b in BINARIES if shutil.which(b) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read()


class Stack:
    """The three servers; pushgateway_url and textfile_dir are what a commbench run is given."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.textfile_dir = self.root / "textfile"
        self.ports = {name: _free_port() for name in ("prometheus", "pushgateway", "node")}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def pushgateway_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['pushgateway']}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['prometheus']}"

    def start(self) -> Stack:
        if absent := missing():
            raise StackUnavailable(f"not installed: {', '.join(absent)} (.ci/install-cluster-tools.sh)")
        self.textfile_dir.mkdir(parents=True, exist_ok=True)
        config = self.root / "prometheus.yml"
        config.write_text(self._config())
        p = self.ports
        self._spawn("pushgateway", ["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{p['pushgateway']}"])
        self._spawn(
            "node",
            [
                "prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{p['node']}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={self.textfile_dir}",
            ],
        )
        self._spawn(
            "prometheus",
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{p['prometheus']}",
            ],
        )
        self._ready("pushgateway", f"{self.pushgateway_url}/-/ready")
        self._ready("node", f"http://127.0.0.1:{p['node']}/metrics")
        self._ready("prometheus", f"{self.prometheus_url}/-/ready")
        return self

    def _config(self) -> str:
        p = self.ports
        return (
            f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
            "scrape_configs:\n"
            "  - job_name: pushgateway\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{p['pushgateway']}']\n"
            "  - job_name: node\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{p['node']}']\n"
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it until stop()
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)

    def _ready(self, name: str, url: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                break
            try:
                _get(url, 2.0)
                return
            except OSError:
                time.sleep(0.2)
        log = (self.root / f"{name}.log").read_text(errors="replace")[-1500:]
        self.stop()
        raise StackUnavailable(f"{name} did not come up at {url}: {log}")

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's answer: (labels, value) per series."""
        url = f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        answer = json.loads(_get(url))
        if answer.get("status") != "success":
            raise AssertionError(f"Prometheus refused {promql!r}: {answer}")
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def wait_for(
        self, promql: str, done: Callable[[list[tuple[dict[str, str], float]]], bool], timeout_s: float = 60.0
    ) -> list[tuple[dict[str, str], float]]:
        """Query until done(answer) holds (the next scrapes bring new samples); the last answer."""
        deadline = time.monotonic() + timeout_s
        answer = self.query(promql)
        while not done(answer) and time.monotonic() < deadline:
            time.sleep(SCRAPE_S / 2)
            answer = self.query(promql)
        return answer

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def promtool_check(text: str) -> tuple[int, list[str]]:
    """promtool check metrics on the text: its exit code (0 clean, 3 lint problems, 1 unparsable)
    and its problem lines."""
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return proc.returncode, [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


def info(stack: Stack) -> dict[str, Any]:
    return {"prometheus": stack.prometheus_url, "pushgateway": stack.pushgateway_url, "textfile": stack.textfile_dir}


if __name__ == "__main__":
    running = Stack(Path(sys.argv[1])).start()
    print(json.dumps(info(running), default=str), flush=True)
    try:
        input()
    finally:
        running.stop()
