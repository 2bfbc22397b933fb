# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/report.yml's controller play, run for real over hosts whose entries come from the hosts themselves.

Each host reads its entry from a file (a command's output, as a module's result would be: data Ansible does not
template), so a GPU name like ``{{ 7 * 7 }}`` reaches the filter as the hosts' facts do. One host is malformed, one
leaves nothing; the other hosts must be in all three files, and each file must read back with its own strict reader.
"""

from __future__ import annotations

import csv
import io
import json
import typing as t
from pathlib import Path

import yaml

from .test_report_hostile import FORMULA, good_host, strict_json

ROOT = Path(__file__).resolve().parents[3]
EVIL = ["{{ 7 * 7 }}", "=HYPERLINK(\"http://evil.example/\",\"x\")", "L4\r=1+2,forged", "<script>alert(1)</script>",
        "{% raw %}x", "@SUM(1)", "-2+3"]


def test_report_play_writes_every_host_and_runs_nothing_a_host_sent(local_play, tmp_path):
    entries = tmp_path / "entries"
    entries.mkdir()
    evil = good_host("gpu-evil", gpus=len(EVIL))
    for gpu, name in zip(evil["facts"]["gpus"], EVIL):
        gpu["name"] = name
    evil["facts"]["driver"]["version"] = "{{ lookup('ansible.builtin.env', 'HOME') }}"
    evil["doctor"]["checks"].append({"id": "=cmd|' /C calc'!A0", "status": "fail"})
    written = {"gpu-ok": good_host("gpu-ok"), "gpu-evil": evil,
               "gpu-malformed": {"host": "gpu-malformed", "status": "ok", "facts": "a string", "doctor": {"status": "ok"}},
               "gpu-nan": {**good_host("gpu-nan"), "doctor": {"status": "weird", "checks": []}}}
    for name, entry in written.items():
        (entries / f"{name}.json").write_text(json.dumps(entry), encoding="utf-8")
    read = {"name": "Read each host's entry as the host sent it", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Read", "ansible.builtin.command": {"argv": ["cat", f"{entries}/{{{{ inventory_hostname }}}}.json"]},
         "register": "sent", "changed_when": False},
        {"name": "Keep", "ansible.builtin.set_fact": {"gpuhost_report_entry": "{{ sent.stdout | from_json }}"}}]}
    report_play = yaml.safe_load((ROOT / "playbooks" / "report.yml").read_text(encoding="utf-8"))[1]
    out = tmp_path / "report"
    report_play["vars"]["gpuhost_report_dir"] = str(out)
    local_play([read, report_play], check=False, hosts={name: {} for name in [*written, "gpu-gone"]})

    data = strict_json((out / "fleet.json").read_text(encoding="utf-8"))
    by_host: dict[str, list[dict[str, t.Any]]] = {}
    for row in data["rows"]:
        by_host.setdefault(row["host"], []).append(row)
    assert sorted(by_host) == ["gpu-evil", "gpu-gone", "gpu-malformed", "gpu-nan", "gpu-ok"]
    assert [r["status"] for r in by_host["gpu-gone"]] == ["unreachable"]
    assert [r["status"] for r in by_host["gpu-malformed"]] == ["malformed facts"]
    assert "facts is a string" in by_host["gpu-malformed"][0]["problems"]
    assert {r["status"] for r in by_host["gpu-nan"]} == {"unknown"}
    assert len(by_host["gpu-ok"]) == 2
    # What the host sent is the text shown, never templated: no 49, no home directory.
    assert sorted(r["model"] for r in by_host["gpu-evil"]) == sorted(n.replace("\r", " ") for n in EVIL)
    assert {r["driver"] for r in by_host["gpu-evil"]} == {"{{ lookup('ansible.builtin.env', 'HOME') }}"}

    text = (out / "fleet.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == len(data["rows"]) + 1 == text.count("\n")
    assert all(not cell.startswith(FORMULA) for row in rows for cell in row)
    models = {row[3] for row in rows[1:] if row[0] == "gpu-evil"}
    assert "'=HYPERLINK(\"http://evil.example/\",\"x\")" in models and "{{ 7 * 7 }}" in models and "'-2+3" in models

    page = (out / "fleet.html").read_text(encoding="utf-8")
    assert "{{ 7 * 7 }}" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
