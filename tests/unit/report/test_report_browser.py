# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The HTML report in a real browser: Debian's headless Chromium (bindep.txt) loads it, runs its script, and the DOM
has one row per GPU with the problem hosts on top. A screenshot is kept under tests/output/report/ (a test artifact)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

from .fleet import fleet

CHROMIUM = shutil.which("chromium")
OUTPUT = Path(__file__).resolve().parents[2] / "output" / "report"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="tool missing: chromium (bindep.txt; tests/deps/install.sh)")


def chromium(*args: str) -> str:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    report = _report.fleet_report(fleet(1000), "2026-11-24 00:00 UTC")
    path = tmp_path_factory.mktemp("report") / "fleet.html"
    path.write_text(_report.report_html(report), encoding="utf-8")
    return path, report


def test_dom_has_one_row_per_gpu_and_problems_on_top(page):
    path, report = page
    dom = chromium("--dump-dom", path.as_uri())
    rows = re.findall(r'<tr class="s-[a-z]+" data-kind="(gpu|host)" data-status="([a-z]+)" data-host="([^"]+)"', dom)
    assert sum(1 for row in rows if row[0] == "gpu") == report["counts"]["gpus"] == 4352
    statuses = [row[1] for row in rows]
    ranks = [_report.HOST_STATUSES.index(s) for s in statuses]
    assert ranks == sorted(ranks), "problem hosts first"
    assert statuses[0] == "unreachable" and {h["host"] for h in report["hosts"] if h["status"] == "failed"} <= {row[2] for row in rows}
    # The script ran in the browser: it counted the rows it can filter.
    assert re.search(rf'id="shown"[^>]*>{len(rows)} of {len(rows)} rows<', dom)


def test_screenshot(page):
    path = page[0]
    OUTPUT.mkdir(parents=True, exist_ok=True)
    shot = OUTPUT / "fleet.png"
    shot.unlink(missing_ok=True)
    chromium("--window-size=1280,900", f"--screenshot={shot}", path.as_uri())
    assert shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
