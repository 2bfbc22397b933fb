# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import glob
import os
import re
import xml.etree.ElementTree as ET

import pytest

from gpufacts_support import OWN_XML, SHARED_FIXTURES, canned_runner

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _smi

PUBLIC_XML = sorted(glob.glob(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "*.xml")))
ARGS = ("/usr/bin/nvidia-smi", "-q", "-x")


def _read(path):
    with open(path, "r", encoding="utf-8") as handle:
        return handle.read()


def own(name):
    return _read(os.path.join(OWN_XML, name))


# -- the public real-world corpus ------------------------------------------------------------------------------
needs_corpus = pytest.mark.skipif(not PUBLIC_XML, reason="public fixture corpus %s is absent" % SHARED_FIXTURES)


@needs_corpus
def test_public_corpus_is_complete():
    assert len(PUBLIC_XML) >= 35  # the corpus as documented in its SOURCES.md; fewer means files went missing


@needs_corpus
@pytest.mark.parametrize("path", PUBLIC_XML, ids=os.path.basename)
def test_public_capture_parses(path):
    text = _read(path)
    tree = ET.fromstring(text[text.find("<"):])
    parsed = _smi.parse(text, gather=("utilization", "processes"))
    elems = tree.findall("gpu")
    assert len(parsed["gpus"]) == len(elems)
    assert parsed["driver"]["version"] == (tree.findtext("driver_version") or None)
    for index, (gpu, elem) in enumerate(zip(parsed["gpus"], elems)):
        assert gpu["index"] == index
        assert gpu["name"] == elem.findtext("product_name").strip()
        uuid = (elem.findtext("uuid") or "").strip()
        assert gpu["uuid"] == (uuid or None)
        if uuid:
            assert re.match(r"^GPU-[0-9a-f-]{36}$", gpu["uuid"])
        if elem.get("id"):
            assert re.match(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", gpu["pci_bus_id"])
        total = (elem.findtext("fb_memory_usage/total") or "").strip()
        assert gpu["memory_total_mib"] == (int(total.split()[0]) if total.endswith("MiB") else None)
        for key in ("ecc", "mig"):
            assert set(gpu[key]) == {"current", "pending"}
            assert all(v in (True, False, None) for v in gpu[key].values())
        assert gpu["compute_mode"] in (None, "default", "exclusive_process", "prohibited", "exclusive_thread")
        for key in ("power_limit_w", "power_limit_min_w", "power_limit_max_w", "power_draw_w"):
            assert gpu[key] is None or 0 < gpu[key] < 2000
        assert gpu["temperature_c"] is None or 0 <= gpu["temperature_c"] < 120
        if elem.find("processes") is None:
            # A capture cut short before <processes>: unknown, never "no process".
            assert gpu["processes"] is None and "no <processes> element" in gpu["processes_error"]
        else:
            assert gpu["processes_error"] is None
            for proc in gpu["processes"]:
                assert proc["pid"] > 0 and proc["type"] in ("C", "G", "C+G")
        arch = (elem.findtext("product_architecture") or "").strip()
        if arch:
            # The catalog's answer from the PCI id agrees with what nvidia-smi says, wherever the id is real.
            assert gpu["architecture"] == arch
            if gpu["pci_device_id"]:
                assert _catalog.architecture(gpu["pci_device_id"]) == arch


@needs_corpus
def test_public_a100_mig_devices():
    parsed = _smi.parse(_read(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "telegraf_a100-sxm4-80gb_mig_535.54.03.xml")))
    gpu = parsed["gpus"][0]
    assert gpu["mig"] == {"current": True, "pending": True}
    assert [(m["gi"], m["ci"], m["memory_mib"]) for m in gpu["mig_devices"]] == [(3, 0, 19968), (4, 0, 19968), (5, 0, 19968), (6, 0, 19968)]
    assert gpu["power_limit_w"] == 500.0 and gpu["pci_device_id"] == "10de:20b2"


@needs_corpus
def test_public_k80_cuda_not_found_and_wide_domains():
    parsed = _smi.parse(_read(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "pai_4x-tesla-k80_430.26.xml")))
    assert parsed["driver"] == {"version": "430.26", "cuda_version": None, "nvml_version": None}
    assert parsed["gpus"][0]["pci_bus_id"] == "1580:00:00.0"
    assert parsed["gpus"][0]["architecture"] == "Kepler" and parsed["gpus"][0]["compute_capability"] == "3.7"


@needs_corpus
def test_public_oldest_schema():
    parsed = _smi.parse(_read(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "rai_grid-k520_352.99.xml")), gather=("utilization",))
    gpu = parsed["gpus"][0]
    assert parsed["driver"]["cuda_version"] is None
    assert (gpu["pci_bus_id"], gpu["persistence_mode"], gpu["mig"]["current"], gpu["architecture"]) == ("0000:00:03.0", True, None, "Kepler")
    assert gpu["utilization"] == {"gpu": 0, "memory": 0}


@needs_corpus
def test_public_partial_capture_without_header():
    parsed = _smi.parse(_read(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "telegraf_gtx1070ti_partial-no-header.xml")))
    assert parsed["driver"]["version"] is None
    assert parsed["gpus"][0]["name"] == "GeForce GTX 1070 Ti"


# -- this collection's hand-written outputs: exact values -------------------------------------------------------
def test_a100_mig_exact():
    parsed = _smi.parse(own("a100_mig_535.104.05.xml"), gather=("utilization", "processes"))
    assert parsed["driver"] == {"version": "535.104.05", "cuda_version": "12.2", "nvml_version": None}
    gpu = parsed["gpus"][0]
    assert gpu["uuid"] == "GPU-5c6d7e8f-1111-4222-8333-444455556666"
    assert gpu["pci_bus_id"] == "0000:07:00.0"
    assert gpu["pci_device_id"] == "10de:20b0"
    assert (gpu["architecture"], gpu["compute_capability"]) == ("Ampere", "8.0")
    assert gpu["memory_total_mib"] == 40960
    assert gpu["mig"] == {"current": True, "pending": False}
    assert gpu["ecc"] == {"current": True, "pending": True}
    assert gpu["mig_devices"] == [
        {"uuid": None, "gi": 1, "ci": 0, "profile": None, "memory_mib": 19968},
        {"uuid": None, "gi": 1, "ci": 1, "profile": None, "memory_mib": 19968},
        {"uuid": None, "gi": 7, "ci": 0, "profile": None, "memory_mib": 4864},
        {"uuid": None, "gi": 8, "ci": 0, "profile": None, "memory_mib": 4864},
    ]
    assert gpu["utilization"] == {"gpu": None, "memory": None}
    assert gpu["power_draw_w"] == 58.12
    assert (gpu["power_limit_w"], gpu["power_limit_min_w"], gpu["power_limit_max_w"]) == (400.0, 100.0, 400.0)
    assert gpu["processes"] == [
        {"pid": 5150, "type": "C", "name": "trainer", "used_memory_mib": 9000, "gpu_instance_id": 1, "compute_instance_id": 0},
        {"pid": 5151, "type": "C", "name": "notebook", "used_memory_mib": 2000, "gpu_instance_id": 7, "compute_instance_id": 0},
    ]


def test_t4_legacy_power_readings():
    gpu = _smi.parse(own("t4_470.82.01_legacy.xml"), gather=("utilization",))["gpus"][0]
    assert gpu["pci_bus_id"] == "0000:00:1e.0"
    assert gpu["compute_mode"] == "exclusive_process"
    assert (gpu["power_limit_w"], gpu["power_limit_min_w"], gpu["power_limit_max_w"]) == (70.0, 60.0, 70.0)
    assert gpu["power_draw_w"] is None  # [Not Supported]
    assert gpu["ecc"] == {"current": True, "pending": False}
    assert gpu["mig"] == {"current": None, "pending": None}
    # No product_architecture before 510: the catalog fills it from the PCI id.
    assert (gpu["architecture"], gpu["compute_capability"]) == ("Turing", "7.5")
    assert gpu["memory_total_mib"] == 15109


def test_rtx3090_v13_without_prolog():
    parsed = _smi.parse(own("rtx3090_595.58.03_v13_no_prolog.xml"), gather=("utilization", "processes", "topology"))
    gpu = parsed["gpus"][0]
    assert parsed["driver"]["cuda_version"] == "13.2"
    assert gpu["ecc"] == {"current": None, "pending": None}  # [N/A]
    assert gpu["persistence_mode"] is False
    assert gpu["power_draw_w"] == 121.5  # average_power_draw, not instant
    assert gpu["power_limit_max_w"] == 366.0
    assert gpu["utilization"] == {"gpu": 35, "memory": 12}
    assert gpu["temperature_c"] == 54
    assert [(p["pid"], p["type"]) for p in gpu["processes"]] == [(1234, "G"), (4242, "C")]
    assert gpu["topology"] is None
    assert any("topology" in m for m in parsed["messages"])


def _versions_only(inner):
    driver = _smi.parse("<nvidia_smi_log>%s</nvidia_smi_log>" % inner)["driver"]
    return driver["version"], driver["cuda_version"]


@pytest.mark.parametrize(
    "inner, expected",
    [
        # The names every public capture so far uses.
        ("<driver_version>595.58.03</driver_version><cuda_version>13.2</cuda_version>", ("595.58.03", "13.2")),
        # R610's header names ("KMD Version", "CUDA UMD Version"), should the XML follow them; the deprecation text
        # `nvidia-smi --version` prints for the driver version is not a version.
        ("<driver_version>Deprecated, see kmd_version instead</driver_version><kmd_version>610.43.02</kmd_version>"
         "<cuda_umd_version>13.3</cuda_umd_version>", ("610.43.02", "13.3")),
        # Both present: the long-standing name wins.
        ("<driver_version>610.43.02</driver_version><kmd_version>610.0.0</kmd_version><cuda_version>13.3</cuda_version>"
         "<cuda_umd_version>13.0</cuda_umd_version>", ("610.43.02", "13.3")),
        ("<driver_version>N/A</driver_version><cuda_version>Not Found</cuda_version>", (None, None)),
        ("", (None, None)),
    ],
)
def test_driver_and_cuda_versions_under_either_name(inner, expected):
    assert _versions_only(inner) == expected


def test_parse_rejects_non_smi_xml():
    with pytest.raises(ValueError):
        _smi.parse("<html></html>")
    with pytest.raises(ValueError):
        _smi.parse("no xml at all")
    with pytest.raises(ValueError):
        _smi.parse("<nvidia_smi_log><gpu>")


@pytest.mark.parametrize(
    "value, expected",
    [("N/A", None), ("[N/A]", None), ("[Not Supported]", None), ("Not Supported", None), ("Requested functionality has been deprecated", None),
     (" 81559 MiB ", "81559 MiB"), (None, None), ("Enabled", "Enabled")],
)
def test_clean(value, expected):
    assert _smi.clean(value) == expected


# -- running it: exit codes and canned outputs (table-driven) ---------------------------------------------------
CASES = [
    # (id, rc, stdout, stderr, state, available)
    ("driver_not_loaded", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
     "Make sure that the latest NVIDIA driver is installed and running.\n", "", "driver_not_loaded", False),
    ("no_permission", 4, "Failed to initialize NVML: Insufficient Permissions\n", "", "no_permission", False),
    ("library_not_found", 12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n", "", "library_not_found", False),
    ("version_mismatch", 18, "Failed to initialize NVML: Driver/library version mismatch\n", "", "driver_version_mismatch", False),
    ("mismatch_by_text", 255, "Failed to initialize NVML: Driver/library version mismatch\n", "", "driver_version_mismatch", False),
    ("unknown", 255, "Failed to initialize NVML: Unknown Error\n", "", "error", False),
    ("garbage_ok_rc", 0, "not xml\n", "", "error", False),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_collect_failures(case):
    _id, rc, out, err, state, available = case
    run = canned_runner({ARGS: (rc, out, err)})
    result = _smi.collect(run, ARGS[0])
    assert run.calls == [list(ARGS)]
    assert (result["state"], result["available"], result["gpus"]) == (state, available, [])
    assert result["message"].startswith("nvidia-smi -q -x exited with %d" % rc)


def test_collect_ok():
    run = canned_runner({ARGS: (0, own("t4_470.82.01_legacy.xml"), "")})
    result = _smi.collect(run, ARGS[0])
    assert result["available"] is True and result["state"] == "ok"
    assert [g["uuid"] for g in result["gpus"]] == ["GPU-3e4f5a6b-3333-4444-8555-666677778888"]
    assert result["gpus"][0]["source"] == "nvidia-smi"


def test_collect_lost_gpu_exit_15():
    stderr = own("two_gpus_one_lost_550.54.15.stderr")
    run = canned_runner({ARGS: (15, own("two_gpus_one_lost_550.54.15.xml"), stderr)})
    result = _smi.collect(run, ARGS[0])
    assert result["available"] is True
    assert [(g["index"], g["pci_bus_id"], g["state"]) for g in result["gpus"]] == [
        (0, "0000:18:00.0", "ok"),
        (None, "0000:2a:00.0", "gpu_lost"),
    ]
    assert "GPU is lost" in result["gpus"][1]["message"]
    assert any("exited with 15" in m for m in result["messages"])


def test_collect_broken_xml():
    run = canned_runner({ARGS: (0, "<nvidia_smi_log><gpu>", "")})
    result = _smi.collect(run, ARGS[0])
    assert result["available"] is False and result["state"] == "error"
    assert "does not parse" in result["message"]


def test_extend_hook_sees_each_parsed_gpu_element_once():
    seen = []
    run = canned_runner({ARGS: (0, own("a100_mig_535.104.05.xml"), "")})
    result = _smi.collect(run, ARGS[0], ("processes",), lambda elem, record: seen.append((elem.tag, elem.get("id"), record["index"])))
    assert result["available"] is True
    assert seen == [("gpu", "00000000:07:00.0", 0)] and len(result["gpus"]) == 1


@pytest.mark.parametrize(
    "text,name",
    [("Default", "default"), ("Exclusive_Process", "exclusive_process"), ("Exclusive Process", "exclusive_process"),
     ("Exclusive_Thread", "exclusive_thread"), ("Prohibited", "prohibited"), ("N/A", None), ("Shared", None)],
)
def test_compute_modes_come_from_the_facts_schema(text, name):
    xml = "<nvidia_smi_log><gpu id='00000000:07:00.0'><compute_mode>%s</compute_mode></gpu></nvidia_smi_log>" % text
    assert _smi.parse(xml)["gpus"][0]["compute_mode"] == name


def test_smi_does_not_import_the_nvml_backend():
    # The record both backends fill is the facts schema's (_gpu_schema), not the NVML backend's.
    with open(_smi.__file__, "r", encoding="utf-8") as handle:
        assert not re.search(r"\b_nvml\b", handle.read())
