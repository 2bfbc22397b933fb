#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_gpu_doctor
short_description: Diagnose an NVIDIA GPU host from its GPU facts and runtime configuration
version_added: 0.1.0
description:
  - Runs the usual troubleshooting steps of an NVIDIA GPU host as checks, each with a status (V(ok), V(warn) or
    V(fail)), the evidence, and the fix.
  - The GPU and driver state comes from O(facts), the output of M(gpuhost.nvidia.nvidia_gpu_facts), gathered with
    C(gather=[health]) for the throttle, PCIe and ECC checks. Without O(facts) the module gathers them itself, in the
    same call, exactly as M(gpuhost.nvidia.nvidia_gpu_facts) with C(gather=[health]) would, and returns them in
    RV(ansible_facts.nvidia_gpu) (one remote call instead of two). It runs no C(lspci), and C(nvidia-smi) only as the
    facts module's fallback when NVML gives nothing.
  - It reads only what the facts do not hold, under O(root) - C(/sys/module/nouveau), the UEFI C(SecureBoot)
    variable, the C(nvidia.ko) built for the running kernel (its signature trailer), the Docker and containerd
    configuration, the CDI specs, C(/dev/char) links and the cgroup version.
  - "The checks: C(driver_loaded), C(driver_flavour) (open vs proprietary module for the GPUs' architecture),
    C(nouveau), C(cuda_version) (against O(required_cuda)), C(boot_kernel) (the kernel the host boots next, the
    newest installed, has an nvidia module: read from the facts' C(kernels), else under O(root)), C(secure_boot),
    C(device_nodes) (C(/dev/nvidiactl),
    C(/dev/nvidiaN), C(/dev/nvidia-uvm)), C(docker_runtime), C(containerd_runtime), C(cdi_spec) (present, naming the
    running driver, newer than the driver library, not duplicated), C(persistence), C(bindings) (nvidia vs vfio-pci,
    see O(vfio_devices)), C(throttling), C(pcie_link), C(ecc) (errors, retired pages, remapped rows),
    C(nvml_cgroup) (the C(Failed to initialize NVML: Unknown Error) cause after C(systemctl daemon-reload)), C(xid)
    (NVRM Xid lines in the kernel log since boot, with their meaning from NVIDIA's Xid catalog: a reset, bad-GPU or
    NVLink Xid fails, a wearing-memory Xid warns, an application's Xid is reported; a kernel log it cannot read is a
    warning, not a clean log), C(fabric_manager) (running on a host with NVSwitches) and C(nvlink) (every GPU has as
    many active NVLinks as its peers, where NVML reports them)."
  - "On the running system (O(root) V(/)) it runs C(journalctl -k -b) (else C(dmesg)), C(systemctl is-active
    nvidia-fabricmanager.service) and C(dockerd --version): C(docker_runtime) accepts no nvidia runtime when Docker
    28.2 or later enables CDI by default. Under another O(root) these are unknown."
  - "The container toolkit checks: C(toolkit_cves) (the installed toolkit, from dpkg's status file, pacman's local
    database or O(toolkit_version), against the releases that fixed CVE-2024-0132 (1.16.2), CVE-2025-23359 (1.17.4)
    and CVE-2025-23266 (1.17.8); a toolkit binary whose version cannot be read is a warning) and C(apt_signed_by) (two
    apt source entries, in C(/etc/apt/sources.list) or C(sources.list.d), for the same repository and suite with
    different C(Signed-By) keys: apt's C(Conflicting values set for option Signed-By))."
  - The module changes nothing. It does not fail when a check fails; read RV(status) or RV(checks).
author:
  - gpuhost.nvidia developers (@gpuhost)
extends_documentation_fragment:
  - gpuhost.nvidia.facts
attributes:
  check_mode:
    support: full
    description: Reads only; check mode runs the same checks.
  diff_mode:
    support: none
    description: Nothing is changed.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  facts:
    required: false
  required_cuda:
    description: The CUDA version the host's workloads need, for example V(12.4). Unset, the check only reports.
    type: str
  vfio_devices:
    description:
      - The GPUs meant for passthrough, by PCI address (V(0000:65:00.0)), PCI device id (V(10de:2204)) or UUID. They
        must be bound to vfio-pci; every other NVIDIA GPU must be bound to nvidia.
    type: list
    elements: str
    default: []
  docker_daemon_json:
    description: Docker's daemon configuration.
    type: path
    default: /etc/docker/daemon.json
  containerd_config:
    description: containerd's main configuration.
    type: path
    default: /etc/containerd/config.toml
  containerd_conf_dir:
    description: containerd's drop-in directory (C(*.toml)), where C(nvidia-ctk runtime configure) writes.
    type: path
    default: /etc/containerd/conf.d
  cdi_dirs:
    description: The CDI spec directories.
    type: list
    elements: path
    default: [/etc/cdi, /var/run/cdi]
  toolkit_version:
    description:
      - The installed NVIDIA Container Toolkit version, for hosts whose package database the C(toolkit_cves) check
        does not read (rpm), for example the output of C(nvidia-ctk --version). Unset, dpkg's status file and
        pacman's local database under O(root) are read.
    type: str
  compose_files:
    description:
      - Compose files (such as the override M(gpuhost.nvidia.gpu_compose_override) writes) whose GPU and MIG UUIDs
        the C(cdi_spec) check compares with the host's devices, as it does for the CDI spec. A file naming a device the
        host no longer has (MIG instances re-created with new UUIDs) fails the check. Missing files are skipped.
    type: list
    elements: path
    default: []
  cdi_kind:
    description: The CDI vendor and class of the NVIDIA GPUs.
    type: str
    default: nvidia.com/gpu
  runtime_name:
    description: The name of the NVIDIA runtime in the Docker and containerd configuration.
    type: str
    default: nvidia
  ecc_corrected_warn:
    description: Warn from this many corrected (single-bit) ECC errors since boot.
    type: int
    default: 100
  skip:
    description: Check ids to leave out.
    type: list
    elements: str
    default: []
  root:
    description:
      - The host's root directory. Only tests change it.
      - Every path option is absolute, printable ASCII, without C(.) or C(..) components; the root must be an
        existing directory. Other values fail the task, naming the option and the value, before anything is read.
    type: path
    default: /
notes:
  - Gather O(facts) with C(gather=[health]), or leave O(facts) out; without the health group the throttle, PCIe and ECC
    checks report that nothing was read.
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - name: NVIDIA Container Toolkit troubleshooting
    description: The NVML Unknown Error after daemon-reload and its workaround.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/troubleshooting.html
"""

EXAMPLES = r"""
- name: Gather the GPU facts with the health group and diagnose the host, in one call
  gpuhost.nvidia.nvidia_gpu_doctor:
    required_cuda: "12.4"
  register: doctor

- name: Gather the GPU facts with the health group
  gpuhost.nvidia.nvidia_gpu_facts:
    gather: [health]

- name: Diagnose the host
  gpuhost.nvidia.nvidia_gpu_doctor:
    facts: "{{ ansible_facts.nvidia_gpu }}"
    required_cuda: "12.4"
  register: doctor

- name: Show the report
  ansible.builtin.debug:
    msg: "{{ doctor.table }}"
"""

RETURN = r"""
ansible_facts:
  description: The GPU facts the module gathered itself, when O(facts) was left out.
  returned: when O(facts) is not given
  type: dict
  contains:
    nvidia_gpu:
      description: As M(gpuhost.nvidia.nvidia_gpu_facts) returns them with C(gather=[health]).
      returned: when O(facts) is not given
      type: dict
status:
  description: The worst status of all checks.
  returned: always
  type: str
  sample: warn
counts:
  description: How many checks ended in each status.
  returned: always
  type: dict
  sample: {ok: 16, warn: 2, fail: 1}
checks:
  description: The checks, in a fixed order.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The check's id.
      returned: always
      type: str
      sample: device_nodes
    title:
      description: What the check looks at.
      returned: always
      type: str
      sample: /dev/nvidia* and /dev/nvidia-uvm present
    status:
      description: V(ok), V(warn) or V(fail).
      returned: always
      type: str
      sample: fail
    evidence:
      description: What the check saw.
      returned: always
      type: str
      sample: "missing /dev/nvidiactl, /dev/nvidia-uvm (present: none)"
    fix:
      description: What to do; empty when ok.
      returned: always
      type: str
      sample: Load the driver
table:
  description: The report as a compact fixed-width table, one line per check and one per fix.
  returned: always
  type: list
  elements: str
  sample: ["STAT  CHECK               EVIDENCE", "OK    nouveau             nouveau is not loaded and binds no GPU"]
markdown:
  description: The report as a Markdown table, for tickets.
  returned: always
  type: str
  sample: "# GPU doctor: gpu01\n\n| status | check | evidence | fix |\n..."
"""

import re
import socket
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor, _facts, _gpu_schema, _validate

# Checked before anything is read from the host.
RULES: dict[str, _validate.Rule] = {
    "required_cuda": _validate.Text(pattern=_validate.CUDA_VERSION_RE, max_length=16, what="a CUDA version such as 12.4"),
    "vfio_devices": _validate.ListOf(_validate.Text(max_length=128, what="a PCI address, a PCI device id or a GPU UUID")),
    "docker_daemon_json": _validate.Path(),
    "containerd_config": _validate.Path(),
    "containerd_conf_dir": _validate.Path(directory=True),
    "cdi_dirs": _validate.ListOf(_validate.Path(directory=True), max_items=16),
    "compose_files": _validate.ListOf(_validate.Path(), max_items=64),
    "cdi_kind": _validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu"),
    "runtime_name": _validate.Identifier(_validate.ENGINE_RUNTIME_RE, "a runtime name such as nvidia"),
    "ecc_corrected_warn": _validate.Integer(0, 2 ** 31, "a count of ECC errors"),
    "skip": _validate.ListOf(_validate.Text(max_length=64, what="a check id")),
    "root": _validate.Path(directory=True),
    "toolkit_version": _validate.Text(pattern=re.compile(r"^[0-9][0-9A-Za-z.+~:-]{0,63}$"), max_length=64,
                                      what="a toolkit version such as 1.17.8"),
}


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            facts=dict(type="dict"),
            required_cuda=dict(type="str"),
            vfio_devices=dict(type="list", elements="str", default=[]),
            docker_daemon_json=dict(type="path", default=_doctor.DEFAULTS["docker_daemon_json"]),
            containerd_config=dict(type="path", default=_doctor.DEFAULTS["containerd_config"]),
            containerd_conf_dir=dict(type="path", default=_doctor.DEFAULTS["containerd_conf_dir"]),
            cdi_dirs=dict(type="list", elements="path", default=list(_doctor.DEFAULTS["cdi_dirs"])),
            compose_files=dict(type="list", elements="path", default=[]),
            cdi_kind=dict(type="str", default=_doctor.DEFAULTS["cdi_kind"]),
            runtime_name=dict(type="str", default=_doctor.DEFAULTS["runtime_name"]),
            ecc_corrected_warn=dict(type="int", default=_doctor.DEFAULTS["ecc_corrected_warn"]),
            skip=dict(type="list", elements="str", default=[]),
            root=dict(type="path", default="/"),
            toolkit_version=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    errors = _validate.check(params, RULES) or _facts.root_errors(params["root"])
    facts_error = _gpu_schema.facts_error(params["facts"]) if params["facts"] is not None else None
    if facts_error:
        errors.append(facts_error)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    unknown = sorted(set(params["skip"]) - set(_doctor.CHECK_IDS))
    if unknown:
        module.fail_json(msg="skip names unknown checks: %s; the checks are %s" % (", ".join(unknown), ", ".join(_doctor.CHECK_IDS)))
    gathered = params["facts"] is None
    facts: dict[str, t.Any] = _facts.gather_on_host(module, gather=["health"], root=params["root"]) if gathered else params["facts"]
    if "gpus" not in facts or "driver" not in facts or not isinstance(facts["gpus"], list) or not isinstance(facts["driver"], dict):
        module.fail_json(msg="facts must be ansible_facts.nvidia_gpu from gpuhost.nvidia.nvidia_gpu_facts (no 'gpus'/'driver' keys)")
    settings = {k: params[k] for k in _doctor.DEFAULTS}
    commands = None
    if params["root"] == "/":
        commands = _doctor.read_commands(
            lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C", "LANGUAGE": "C"}),  # type: ignore[misc]
            module.get_bin_path)
    else:
        commands = _doctor.unread_commands("the doctor reads the host tree under %s, not a running system" % params["root"])
    host = _doctor.read_host(facts, settings, root=params["root"], commands=commands)
    checks = _doctor.run_checks(facts, host, settings, skip=params["skip"])
    result = _doctor.summary(checks)
    hostname = socket.gethostname()
    module.exit_json(
        changed=False,
        ansible_facts={"nvidia_gpu": facts} if gathered else {},
        status=result["status"],
        counts=result["counts"],
        checks=checks,
        table=_doctor.table(checks),
        markdown=_doctor.markdown(hostname, checks),
    )


if __name__ == "__main__":
    main()
