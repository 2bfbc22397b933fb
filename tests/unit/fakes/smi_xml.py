# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Render a fake GPU profile as ``nvidia-smi -q -x`` XML (the DTD v12 layout of the 535-570 drivers, TAB indented).

Synthetic output for tests and benchmarks: it carries only the elements the facts parser reads plus a few
neighbours, with the profile's values, so the NVML and nvidia-smi backends can be compared on the same GPUs.
``python smi_xml.py PROFILE`` prints it; tests/unit/fixtures/nvidia-smi-xml/h100_sxm_8x_nvswitch.xml is that output.
"""

from __future__ import annotations

import os
import sys
import typing as t
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_pynvml import load_profile  # noqa: E402  pylint: disable=wrong-import-position

_ARCH = {9: "Hopper", 8: "Ampere", 7: "Turing"}
_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def _onoff(pair: t.Any, index: int) -> str:
    if not pair:
        return "N/A"
    return "Enabled" if pair[index] else "Disabled"


def _watts(milliwatts: t.Any) -> str:
    return "N/A" if milliwatts is None else "%.2f W" % (milliwatts / 1000.0)


def render(profile: dict[str, t.Any]) -> str:
    nvml = profile["nvml"]
    gpus = [g for g in profile.get("gpus") or [] if g.get("nvml_visible", g.get("driver") == "nvidia")]
    cuda = nvml["cuda_driver_version"]
    lines = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
        "<nvidia_smi_log>",
        "\t<timestamp>Mon Jan  1 00:00:00 2024</timestamp>",
        "\t<driver_version>%s</driver_version>" % nvml["driver_version"],
        "\t<cuda_version>%d.%d</cuda_version>" % (cuda // 1000, (cuda % 1000) // 10),
        "\t<attached_gpus>%d</attached_gpus>" % len(gpus),
    ]
    for gpu in gpus:
        domain, bus, rest = gpu["pci_bus_id"].split(":")
        bus_id = ("%08x:%s:%s" % (int(domain, 16), bus, rest)).upper()
        util = gpu.get("utilization") or {}
        cc = gpu.get("compute_capability")
        lines += [
            '\t<gpu id="%s">' % bus_id,
            "\t\t<product_name>%s</product_name>" % escape(gpu["name"]),
            "\t\t<product_architecture>%s</product_architecture>" % (_ARCH.get(cc[0], "N/A") if cc else "N/A"),
            "\t\t<persistence_mode>%s</persistence_mode>" % ("Enabled" if gpu.get("persistence_mode") else "Disabled"),
            "\t\t<mig_mode>",
            "\t\t\t<current_mig>%s</current_mig>" % _onoff(gpu.get("mig"), 0),
            "\t\t\t<pending_mig>%s</pending_mig>" % _onoff(gpu.get("mig"), 1),
            "\t\t</mig_mode>",
            "\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>",
            "\t\t<uuid>%s</uuid>" % gpu["uuid"],
            "\t\t<minor_number>%d</minor_number>" % gpu.get("minor_number", 0),
            "\t\t<pci>",
            "\t\t\t<pci_bus>%s</pci_bus>" % bus.upper(),
            "\t\t\t<pci_domain>%s</pci_domain>" % domain.upper(),
            "\t\t\t<pci_device_id>%04X10DE</pci_device_id>" % gpu["device_id"],
            "\t\t\t<pci_bus_id>%s</pci_bus_id>" % bus_id,
            "\t\t</pci>",
            "\t\t<fb_memory_usage>",
            "\t\t\t<total>%d MiB</total>" % gpu["memory_total_mib"],
            "\t\t\t<reserved>0 MiB</reserved>",
            "\t\t\t<used>0 MiB</used>",
            "\t\t\t<free>%d MiB</free>" % gpu["memory_total_mib"],
            "\t\t</fb_memory_usage>",
            "\t\t<compute_mode>%s</compute_mode>" % _MODES[gpu.get("compute_mode", 0)],
            "\t\t<utilization>",
            "\t\t\t<gpu_util>%s</gpu_util>" % ("%d %%" % util["gpu"] if "gpu" in util else "N/A"),
            "\t\t\t<memory_util>%s</memory_util>" % ("%d %%" % util["memory"] if "memory" in util else "N/A"),
            "\t\t</utilization>",
            "\t\t<ecc_mode>",
            "\t\t\t<current_ecc>%s</current_ecc>" % _onoff(gpu.get("ecc"), 0),
            "\t\t\t<pending_ecc>%s</pending_ecc>" % _onoff(gpu.get("ecc"), 1),
            "\t\t</ecc_mode>",
            "\t\t<temperature>",
            "\t\t\t<gpu_temp>%s</gpu_temp>" % ("N/A" if gpu.get("temperature_c") is None else "%d C" % gpu["temperature_c"]),
            "\t\t</temperature>",
            "\t\t<gpu_power_readings>",
            "\t\t\t<power_state>P0</power_state>",
            "\t\t\t<power_draw>%s</power_draw>" % _watts(gpu.get("power_usage_mw")),
            "\t\t\t<current_power_limit>%s</current_power_limit>" % _watts(gpu.get("power_limit_mw")),
            "\t\t\t<default_power_limit>%s</default_power_limit>" % _watts(gpu.get("power_limit_mw")),
            "\t\t\t<min_power_limit>%s</min_power_limit>" % _watts((gpu.get("power_limit_constraints_mw") or [None, None])[0]),
            "\t\t\t<max_power_limit>%s</max_power_limit>" % _watts((gpu.get("power_limit_constraints_mw") or [None, None])[1]),
            "\t\t</gpu_power_readings>",
            "\t\t<processes>",
        ]
        for proc in gpu.get("processes") or []:
            lines += [
                "\t\t\t<process_info>",
                "\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>",
                "\t\t\t\t<compute_instance_id>N/A</compute_instance_id>",
                "\t\t\t\t<pid>%d</pid>" % proc["pid"],
                "\t\t\t\t<type>%s</type>" % proc.get("type", "C"),
                "\t\t\t\t<process_name>%s</process_name>" % escape(proc.get("name") or ""),
                "\t\t\t\t<used_memory>%s</used_memory>" % ("N/A" if proc.get("used_mib") is None else "%d MiB" % proc["used_mib"]),
                "\t\t\t</process_info>",
            ]
        lines += ["\t\t</processes>", "\t</gpu>", ""]
    lines.append("</nvidia_smi_log>")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(load_profile(sys.argv[1])))
