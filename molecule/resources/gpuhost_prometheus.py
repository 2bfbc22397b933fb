"""Debian's prometheus (bindep.txt) on the controller for the exporter scenarios: it loads the file_sd and the rules
file playbooks/exporter.yml wrote, scrapes the test hosts, and answers instant queries."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import typing as t
import urllib.parse
import urllib.request
from pathlib import Path

import pytest


def query(base: str, expr: str) -> list[dict]:
    """The result vector of the instant query ``expr`` on the Prometheus at ``base``."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - localhost
        data = json.loads(resp.read())
    assert data["status"] == "success", data
    return data["data"]["result"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prometheus(work: Path, rules: Path, file_sd: Path, ready: t.Callable[[str], bool], waiting_for: str) -> t.Iterator[str]:
    """A Prometheus in ``work`` until the block ends; yields its base URL once ``ready(base)`` holds (60 s at most,
    failing with ``waiting_for`` and the targets' ``up``)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (bindep.txt; tests/deps/install.sh)")
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: gpu\n    file_sd_configs: [{{files: ['{file_sd}'], refresh_interval: 1s}}]\n",
        encoding="utf-8")
    port = _free_port()
    with (work / "log").open("w") as log:
        proc = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if ready(base):
                    break
            except OSError:
                pass
            assert proc.poll() is None, (work / "log").read_text()
            assert time.monotonic() < deadline, f"Prometheus did not scrape {waiting_for}: {query(base, 'up')}"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
