# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A synthetic fleet (generated facts in the nvidia_gpu_facts schema, doctor results) for the report tests.

    .venv/bin/python tests/unit/report/fleet.py OUT_DIR [HOSTS]   writes fleet.{json,csv,html} of a generated fleet
    (for a screenshot: 40 hosts, then chromium --headless --window-size=1200,1000 --screenshot; the README shows the
    gpu_exporter Molecule run's report instead)
"""

from __future__ import annotations

import random
import sys
import typing as t
from pathlib import Path

MODELS = [("NVIDIA H100 80GB HBM3", 81559, 8), ("NVIDIA A100-SXM4-80GB", 81920, 8), ("NVIDIA L40S", 46068, 4),
          ("NVIDIA L4", 23034, 2), ("NVIDIA GeForce RTX 4090", 24564, 1), ("Tesla T4", 15360, 4)]
DRIVERS = [("580.65.06", "13.0"), ("570.172.08", "12.8"), ("550.163.01", "12.4"), ("535.261.03", "12.2")]


def host_facts(rng: random.Random, index: int) -> dict[str, t.Any]:
    name, memory, count = MODELS[index % len(MODELS)]
    version, cuda = DRIVERS[rng.randrange(len(DRIVERS))]
    gpus = []
    for i in range(count):
        bound = "vfio-pci" if (index % 97 == 5 and i == 0) else "nvidia"
        mig = {"current": "Enabled" if (name.startswith("NVIDIA A100") and index % 3 == 0) else "Disabled", "pending": None}
        mig["pending"] = mig["current"]
        gpus.append({"index": i, "uuid": f"GPU-{index:08x}-{i:04x}-4000-8000-{index * 16 + i:012x}", "name": name,
                     "pci_bus_id": f"0000:{0x18 + i * 0x10:02x}:00.0", "memory_total_mib": memory, "bound_driver": bound,
                     "mig": mig, "ecc": {"current": "Enabled", "pending": "Enabled"}})
    return {"present": True, "source": "nvml", "state": "ok", "driver": {"version": version, "cuda_version": cuda},
            "gpus": gpus, "reboot_required": index % 23 == 0, "reasons": []}


def doctor(rng: random.Random, index: int) -> dict[str, t.Any]:
    status = "fail" if index % 41 == 7 else ("warn" if index % 13 == 4 else "ok")
    checks = [{"id": "driver_loaded", "status": "ok"}, {"id": "persistence_mode", "status": "warn" if status == "warn" else "ok"},
              {"id": "xid_errors", "status": "fail" if status == "fail" else "ok"}]
    return {"status": status, "counts": {}, "checks": checks}


def fleet(hosts: int = 1000, seed: int = 22) -> list[dict[str, t.Any]]:
    """Hosts gpu0001..: most ok, some warn/fail, every 50th unreachable, every 77th failed."""
    rng = random.Random(seed)
    out: list[dict[str, t.Any]] = []
    for i in range(1, hosts + 1):
        name = f"gpu{i:04d}.example.net"
        if i % 50 == 10:
            out.append({"host": name, "status": "unreachable"})
        elif i % 77 == 20:
            out.append({"host": name, "status": "failed", "error": "nvidia_gpu_facts: permission denied reading /sys"})
        else:
            out.append({"host": name, "status": "ok", "facts": host_facts(rng, i), "doctor": doctor(rng, i)})
    return out


if __name__ == "__main__":
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

    dest = Path(sys.argv[1])
    dest.mkdir(parents=True, exist_ok=True)
    report = _report.fleet_report(fleet(int(sys.argv[2]) if len(sys.argv) > 2 else 1000), "2026-11-24 00:00 UTC")
    (dest / "fleet.json").write_text(_report.report_json(report))
    (dest / "fleet.csv").write_text(_report.report_csv(report))
    (dest / "fleet.html").write_text(_report.report_html(report))
