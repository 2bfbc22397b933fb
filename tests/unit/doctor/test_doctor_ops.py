# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The doctor's checks that ops teams run by hand: Xid errors in the kernel log since boot, Fabric Manager on an
NVSwitch host, NVLink links active, and Docker >= 28.2's CDI default; and read_commands, which reads them on the host.
Each check has its ok and its fail (or warn) side."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor

PARAMS = dict(_doctor.DEFAULTS)
# Kernel log lines in the driver's format (NVRM: Xid (PCI:<domain:bus:device>): <xid>, ...); the 79 line is the one
# NVIDIA's Xid catalog and the GPU-health pages quote.
XID_79 = "[ 8123.456] NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."
XID_13 = "[  912.001] NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x405840=0x0"
XID_63 = "[ 5000.000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."
XID_94 = "[ 6000.100] NVRM: Xid (PCI:0000:18:00): 94, pid=77, name=train, Contained: SM (0x1). RST: No, D-RST: No"


def host(**values: t.Any) -> dict[str, t.Any]:
    out = _doctor.unread_commands("")
    out.update(kernel_log="", kernel_log_source="journalctl -k -b", docker_version=None, fabric_manager="active")
    out.update(values)
    return out


def gpu(index: int, links: int | None) -> dict[str, t.Any]:
    record: dict[str, t.Any] = {"index": index, "pci_bus_id": "0000:%02x:00.0" % (0x18 + index), "uuid": "GPU-%d" % index}
    if links is not None:
        record["topology"] = {"nvlink_active_links": links, "peers": []}
    return record


# --- xid ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, status, evidence", [
    ([], "ok", "no NVRM Xid line in journalctl -k -b"),
    (["[ 1.0] nvidia: loading out-of-tree module taints kernel."], "ok", "no NVRM Xid line in journalctl -k -b"),
    ([XID_13, XID_13], "ok", "journalctl -k -b: application Xids only: Xid 13 (graphics engine exception) on 0000:18:00"),
    ([XID_63], "warn", "journalctl -k -b: Xid 63 (ECC page retirement or row remapping recording event) on 0000:10:1c"),
    ([XID_94, XID_13], "warn", "journalctl -k -b: Xid 13 (graphics engine exception) on 0000:18:00; Xid 94 (contained ECC error) on "
                               "0000:18:00"),
    ([XID_13, XID_79], "fail", "journalctl -k -b: Xid 13 (graphics engine exception) on 0000:18:00; Xid 79 (GPU has fallen off the "
                               "bus) on 0000:c6:00"),
    (["NVRM: Xid (PCI:0000:3b:00): 48, pid=9, An uncorrectable double bit error (DBE) has been detected on GPU"], "fail",
     "journalctl -k -b: Xid 48 (double-bit ECC error) on 0000:3b:00"),
    (["NVRM: Xid (PCI:0000:3b:00): 200, pid=9, something new"], "warn", "journalctl -k -b: Xid 200 (not in the catalog's short list) on 0000:3b:00"),
])
def test_xid(lines, status, evidence):
    result = _doctor.check_xid({}, host(kernel_log="\n".join(lines)), PARAMS)
    assert (result["status"], result["evidence"]) == (status, evidence)
    assert bool(result["fix"]) is (status != "ok")
    if status != "ok":
        assert "nvidia-smi -r" in result["fix"] and "docs.nvidia.com/deploy/xid-errors" in result["fix"]


def test_an_unreadable_kernel_log_is_unknown_not_clean():
    result = _doctor.check_xid({}, host(kernel_log=None, kernel_log_error="dmesg: read kernel buffer failed: Operation not permitted"),
                               PARAMS)
    assert result["status"] == "warn"
    assert result["evidence"] == ("cannot read the kernel log (dmesg: read kernel buffer failed: Operation not permitted): Xid errors "
                                  "are unknown, not absent")


def test_the_catalog_tables_do_not_overlap():
    assert not set(_doctor.XID_FAIL) & set(_doctor.XID_WARN)
    assert not (set(_doctor.XID_FAIL) | set(_doctor.XID_WARN)) & set(_doctor.XID_APPLICATION)
    # the Xids the shipped alert rules call out are the doctor's (roles/gpu_exporter/files/alerts)
    assert set(_doctor.XID_FAIL) == {48, 64, 74, 79, 95, 119, 120, 140, 154}


def test_xid_events_read_the_drivers_line_format():
    assert _doctor.xid_events("\n".join([XID_79, "NVRM: Xid (PCI:0000:C6:00.0): 74, pid=1, NVLink: fatal error", "Xid 79 in prose"])) == [
        {"pci": "0000:c6:00", "xid": 79, "line": XID_79.strip()},
        {"pci": "0000:c6:00", "xid": 74, "line": "NVRM: Xid (PCI:0000:C6:00.0): 74, pid=1, NVLink: fatal error"}]


# --- fabric_manager -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("switches, state, status, evidence", [
    (0, None, "ok", "no NVSwitch on the PCI bus: Fabric Manager is not needed"),
    (4, "active", "ok", "nvidia-fabricmanager.service is active for 4 NVSwitch(es)"),
    (4, "inactive", "fail", "4 NVSwitch(es), but nvidia-fabricmanager.service is inactive: CUDA cannot initialise the GPUs "
                            "(cudaErrorSystemNotReady) until it runs"),
    (6, "failed", "fail", "6 NVSwitch(es), but nvidia-fabricmanager.service is failed: CUDA cannot initialise the GPUs "
                          "(cudaErrorSystemNotReady) until it runs"),
    (4, None, "warn", "4 NVSwitch(es), and the state of nvidia-fabricmanager.service cannot be read (systemctl is not installed)"),
])
def test_fabric_manager(switches, state, status, evidence):
    result = _doctor.check_fabric_manager({"nvswitch_count": switches}, host(fabric_manager=state, fabric_manager_error="systemctl is not installed"),
                                          PARAMS)
    assert (result["status"], result["evidence"]) == (status, evidence)
    assert ("nvidia_driver_fabric_manager" in result["fix"]) is (status != "ok")


# --- nvlink ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("links, status, evidence", [
    ([None, None], "ok", "no GPU reports its NVLink state (needs NVML)"),
    ([0, 0], "ok", "no active NVLink on 2 GPU(s) (PCIe-only GPUs)"),
    ([18, 18, 18], "ok", "18 active NVLinks on each of 3 GPU(s)"),
    ([18, 16, 18, 0], "warn", "fewer active NVLinks than its peers: GPU 1 (0000:19:00.0): 16 of 18; GPU 3 (0000:1b:00.0): 0 of 18"),
])
def test_nvlink(links, status, evidence):
    facts = {"gpus": [gpu(i, n) for i, n in enumerate(links)]}
    result = _doctor.check_nvlink(facts, host(), PARAMS)
    assert (result["status"], result["evidence"]) == (status, evidence)
    assert ("nvidia-smi nvlink" in result["fix"]) is (status != "ok")


def test_nvlink_leaves_out_passthrough_gpus():
    facts = {"gpus": [gpu(0, 18), gpu(1, 0)]}
    assert _doctor.check_nvlink(facts, host(), dict(PARAMS, vfio_devices=["0000:19:00.0"]))["status"] == "ok"


# --- Docker's CDI default -------------------------------------------------------------------------------------------

def _docker(text: str | None, version: str | None) -> dict[str, str]:
    config = {"path": "/etc/docker/daemon.json", "exists": text is not None, "text": text or ""}
    return _doctor.check_docker_runtime({}, dict(host(docker_version=version), docker_daemon_json=config, root="/"), PARAMS)


@pytest.mark.parametrize("text, version, status, evidence", [
    ('{"log-driver": "json-file"}', "28.2.0", "ok",
     "no nvidia runtime, but Docker 28.2.0 enables CDI by default: use --device nvidia.com/gpu=all"),
    ('{"log-driver": "json-file"}', "29.1.3", "ok",
     "no nvidia runtime, but Docker 29.1.3 enables CDI by default: use --device nvidia.com/gpu=all"),
    (None, "28.5.2", "ok", "/etc/docker/daemon.json does not exist, but Docker 28.5.2 enables CDI by default: use --device nvidia.com/gpu=all"),
    ('{"log-driver": "json-file"}', "28.1.1", "warn",
     "/etc/docker/daemon.json defines no nvidia runtime and CDI is not enabled (Docker 28.1.1; CDI is on by default from 28.2)"),
    ('{"log-driver": "json-file"}', "20.10.24", "warn",
     "/etc/docker/daemon.json defines no nvidia runtime and CDI is not enabled (Docker 20.10.24; CDI is on by default from 28.2)"),
    ('{"features": {"cdi": false}}', "28.3.0", "warn",
     "/etc/docker/daemon.json defines no nvidia runtime and CDI is not enabled (features.cdi is false)"),
    (None, "26.1.5", "warn",
     "/etc/docker/daemon.json does not exist: Docker knows no nvidia runtime (Docker 26.1.5; CDI is on by default from 28.2)"),
])
def test_docker_cdi_reads_the_engine_version(text, version, status, evidence):
    result = _docker(text, version)
    assert (result["status"], result["evidence"]) == (status, evidence)


# --- read_commands --------------------------------------------------------------------------------------------------

class Host:
    """A fake host: commands by their first word, each answering (rc, stdout, stderr)."""

    def __init__(self, answers: dict[str, tuple[int, str, str]], installed: t.Iterable[str] | None = None):
        self.answers = answers
        self.installed = set(installed if installed is not None else answers)
        self.ran: list[list[str]] = []

    def which(self, name: str) -> str | None:
        return "/usr/bin/" + name if name in self.installed else None

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        self.ran.append(argv)
        return self.answers[argv[0].rsplit("/", 1)[-1]]


def test_read_commands_on_a_gpu_host():
    fake = Host({"journalctl": (0, XID_79 + "\n", ""), "dmesg": (0, "unused", ""), "systemctl": (3, "inactive\n", ""),
                 "dockerd": (0, "Docker version 28.3.2, build e77ff99\n", "")})
    out = _doctor.read_commands(fake.run, fake.which)
    assert out == {"kernel_log": XID_79 + "\n", "kernel_log_source": "journalctl -k -b", "kernel_log_error": "",
                   "fabric_manager": "inactive", "fabric_manager_error": "", "docker_version": "28.3.2"}
    assert fake.ran == [["/usr/bin/journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"],
                        ["/usr/bin/systemctl", "is-active", "nvidia-fabricmanager.service"], ["/usr/bin/dockerd", "--version"]]


def test_read_commands_falls_back_to_dmesg_and_says_why_it_cannot_read():
    fake = Host({"journalctl": (0, "", ""), "dmesg": (0, XID_13, ""), "systemctl": (4, "", "")})
    out = _doctor.read_commands(fake.run, fake.which)
    assert (out["kernel_log"], out["kernel_log_source"]) == (XID_13, "dmesg")
    assert out["fabric_manager"] is None and out["fabric_manager_error"] == "systemctl is-active printed nothing (rc 4)"
    assert out["docker_version"] is None
    # a container: an empty journal and a dmesg the kernel refuses
    fake = Host({"journalctl": (0, "", ""), "dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")})
    out = _doctor.read_commands(fake.run, fake.which)
    assert out["kernel_log"] is None
    assert out["kernel_log_error"] == ("journalctl -k -b: no kernel messages in the journal; dmesg: read kernel buffer failed: "
                                       "Operation not permitted")
    assert _doctor.check_xid({}, out, PARAMS)["status"] == "warn"
    assert _doctor.read_commands(Host({}).run, Host({}).which)["kernel_log_error"] == "neither journalctl nor dmesg is installed"
