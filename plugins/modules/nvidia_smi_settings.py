#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_smi_settings
short_description: Set persistence, compute mode, power limit, clocks, ECC, MIG mode and MIG instances of NVIDIA GPUs
version_added: 0.1.0
description:
  - Declares the desired settings for a set of GPUs, compares them with what each GPU reports, and changes only what
    differs. A second run with the same options reports no change.
  - Settings are applied through NVML (nvidia-ml-py). When NVML cannot be loaded from Python but the C(nvidia-smi)
    binary works, the module runs C(nvidia-smi) argument lists instead.
  - Every option that can be checked without a GPU is checked first, before the module looks for GPUs, so a bad
    value fails on every host (a power limit that is not a finite number from above 0 to 5000 W, clocks outside 1
    to 50000 MHz, more than 7 MIG GPU instances, a malformed GPU selector or MIG profile name).
  - Every option is checked against every selected GPU before anything changes. A power limit outside a GPU's range,
    a selector that matches no GPU, MIG on a GPU without MIG, clocks that a GPU does not support, or a setting that
    the driver reports as not supported fails the task and names the GPU and the allowed values.
  - ECC and MIG mode changes take effect only after a GPU reset or a reboot. The module reports them as pending in
    RV(gpus[].pending), RV(reboot_required), RV(reset_required) and RV(reasons), and does not report them as a change
    again while they are pending.
  - A host without GPUs or without a loaded NVIDIA driver is not an error. The module returns RV(state) (for example
    V(driver_not_loaded)), RV(msg) and C(skipped=true), changes nothing and does not fail the play.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - The NVIDIA driver, and the Python package C(nvidia-ml-py) (module C(pynvml)) on the managed host, or the
    C(nvidia-smi) binary in E(PATH).
  - O(mig_layout) needs NVML. O(reset_gpus) needs C(nvidia-smi).
  - Root privileges on the managed host to change settings.
  - The P(gpuhost.nvidia.gpu_settings#role) role installs C(nvidia-persistenced), applies these settings and
    re-applies them at boot.
attributes:
  check_mode:
    support: full
    description: In check mode the module reads the GPUs and reports the plan; it calls no NVML setter and runs no command that changes anything.
  diff_mode:
    support: full
    description: The diff shows the managed settings of each selected GPU before and after.
  idempotent:
    support: full
    description: Settings are compared with the GPUs' state, pending ECC and MIG changes with their pending value.
options:
  gpus:
    description:
      - The GPUs to configure. Each item is V(all), an NVML index (V(0)), a UUID (V(GPU-5c6d7e8f-...)), a PCI bus id
        (V(0000:07:00.0)) or a model name as NVML reports it (V(NVIDIA A100-SXM4-40GB)); model names compare without
        case and may use shell wildcards (V(*A100*)).
      - An item that matches no GPU on a host with a working driver fails the task and lists the GPUs there are.
      - A malformed item fails on every host, also one without GPUs or driver - an empty item, an index outside 0
        to 63 or a negative one, a C(GPU-) UUID that is not one, a C(MIG-) UUID (MIG devices have no settings), an
        item with a C(:) that is not a PCI bus id, control characters or non-ASCII. The list may not be empty.
    type: list
    elements: str
    default: [all]
  persistence_mode:
    description:
      - Whether the driver stays initialised while no client uses the GPU.
      - On hosts with C(nvidia-persistenced), the daemon is the preferred way to keep persistence on; see the
        P(gpuhost.nvidia.gpu_settings#role) role.
    type: bool
  compute_mode:
    description: The compute mode. V(EXCLUSIVE_PROCESS) lets one process at a time create contexts; V(PROHIBITED) none.
    type: str
    choices: [DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED]
  power_limit:
    description:
      - The power management limit in watts. It must lie within the GPU's minimum and maximum limit
        (C(power_limit_min_w) and C(power_limit_max_w) in the facts of M(gpuhost.nvidia.nvidia_gpu_facts)).
      - Lost at reboot; the P(gpuhost.nvidia.gpu_settings#role) role re-applies it at boot.
    type: float
  applications_clocks:
    description:
      - Application clocks, a memory clock and a graphics clock from the GPU's supported clock table.
        Give both clocks, or O(applications_clocks.reset=true) to go back to the default application clocks.
    type: dict
    suboptions:
      memory_mhz:
        description: The memory clock in MHz; one of the GPU's supported memory clocks.
        type: int
      graphics_mhz:
        description: The graphics clock in MHz; one of the graphics clocks supported with O(applications_clocks.memory_mhz).
        type: int
      reset:
        description: Reset the application clocks to the GPU's defaults.
        type: bool
  locked_clocks:
    description:
      - Lock the GPU clock to a range (C(nvidia-smi --lock-gpu-clocks)). Both ends must lie within the GPU's supported
        graphics clocks. Give both, or O(locked_clocks.reset=true) to unlock.
      - NVML cannot read locked clocks back, so the module records what it applied in O(state_path) and compares with that.
    type: dict
    suboptions:
      min_mhz:
        description: The lowest GPU clock in MHz.
        type: int
      max_mhz:
        description: The highest GPU clock in MHz.
        type: int
      reset:
        description: Unlock the GPU clocks.
        type: bool
  ecc:
    description: Whether ECC is on. A change is pending until the GPU is reset or the host reboots.
    type: bool
  mig:
    description:
      - Whether MIG mode is on. A change may be pending until the GPU is reset or the host reboots.
      - Fails on GPUs that do not support MIG.
    type: bool
  mig_layout:
    description:
      - The MIG GPU instances, and the compute instances in each, that every selected GPU should have, like the
        C(mig-devices) of an C(nvidia-mig-parted) configuration. Instances that do not match are destroyed, missing
        ones are created, matching ones are left alone. V([]) destroys every instance.
      - Instances with processes running in them are never destroyed; the task fails and names the processes. Nor are
        they destroyed while the GPU's processes cannot be read.
      - Applied only while MIG mode is active. Omit it to leave MIG instances alone.
      - MIG instances do not survive a reboot; the P(gpuhost.nvidia.gpu_settings#role) role re-creates them at boot.
    type: list
    elements: dict
    suboptions:
      profile:
        description: The GPU instance profile, as C(nvidia-smi mig -lgip) names it (V(1g.5gb), V(3g.20gb)).
        type: str
        required: true
      count:
        description: How many GPU instances of this profile, from 0 to 7 (and at most 7 in the whole layout).
        type: int
        default: 1
      compute_instances:
        description:
          - The compute instance profiles inside each of these GPU instances (V(1c.3g.20gb), V(2c.3g.20gb)).
          - The default is one compute instance that spans the GPU instance.
        type: list
        elements: str
  reset_gpus:
    description:
      - Reset GPUs that have an ECC or MIG mode change pending (C(nvidia-smi --gpu-reset)), so that it takes effect now.
      - A GPU with running processes is never reset. The task fails before anything changes and names the processes.
        A GPU whose processes cannot be read (RV(gpus[].processes_error)) is not reset either.
    type: bool
    default: false
  state_path:
    description:
      - The file where the module records the locked clocks it applied, by GPU UUID.
      - An absolute path; a directory, a special file, a symbolic link to nothing or a path under a file is refused.
      - The default lives on a tmpfs, so the record is forgotten at reboot, as the locked clocks are.
    type: path
    default: /run/gpuhost/nvidia_smi_settings.json
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
    description: Reports the GPUs, their power limit range and their pending ECC and MIG modes.
  - name: nvidia-smi documentation
    description: The options this module mirrors (C(-pm), C(-c), C(-pl), C(-ac), C(-lgc), C(-e), C(-mig)).
    link: https://docs.nvidia.com/deploy/nvidia-smi/
  - name: NVIDIA MIG user guide
    description: GPU instance and compute instance profiles.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
  - name: nvidia-mig-parted
    description: The declarative MIG tool whose C(mig-devices) O(mig_layout) follows.
    link: https://github.com/NVIDIA/mig-parted
notes:
  - Commands run with C(LC_ALL=C). GPUs are addressed by PCI bus id in C(nvidia-smi) argument lists.
  - With the C(nvidia-smi) fallback, O(mig_layout) is refused before anything changes, because C(nvidia-smi -q -x)
    does not tell the profiles of existing GPU instances.
"""

EXAMPLES = r"""
- name: Persistence on, exclusive-process compute mode and a 300 W power limit on every GPU
  gpuhost.nvidia.nvidia_smi_settings:
    persistence_mode: true
    compute_mode: EXCLUSIVE_PROCESS
    power_limit: 300

- name: Lock the clocks of two GPUs, chosen by UUID and by PCI bus id
  gpuhost.nvidia.nvidia_smi_settings:
    gpus:
      - GPU-5c6d7e8f-1111-4222-8333-444455556666
      - "0000:2a:00.0"
    locked_clocks:
      min_mhz: 1410
      max_mhz: 1410

- name: MIG on, with one 3g.20gb instance split in two and two 1g.5gb instances, on every A100
  gpuhost.nvidia.nvidia_smi_settings:
    gpus: ["NVIDIA A100*"]
    mig: true
    mig_layout:
      - profile: 3g.20gb
        compute_instances: [1c.3g.20gb, 2c.3g.20gb]
      - profile: 1g.5gb
        count: 2
  register: gpu_settings_mig

- name: Say why a reboot is needed
  ansible.builtin.debug:
    msg: "{{ gpu_settings_mig.reasons }}"
  when: gpu_settings_mig.reboot_required
"""

RETURN = r"""
state:
  description:
    - V(ok) when the GPUs could be read. Otherwise why not; the module then changes nothing and returns C(skipped=true).
    - V(driver_not_loaded), V(no_gpu) and V(driver_version_mismatch) are reported without failing.
  returned: always
  type: str
  sample: ok
  choices: [ok, no_gpu, driver_not_loaded, driver_version_mismatch]
msg:
  description: What the module did, or why it did nothing.
  returned: always
  type: str
  sample: "2 settings changed on 1 GPU"
source:
  description: How the GPUs were read and changed. Null when neither worked.
  returned: always
  type: str
  sample: nvml
  choices: [nvml, nvidia-smi]
messages:
  description: Why a richer source was not used, and notes from the plan (for example a MIG layout waiting for MIG mode).
  returned: always
  type: list
  elements: str
  sample: ["GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): mig_layout is applied once MIG mode is active; it is disabled now (pending: enabled)"]
gpus:
  description: One entry per selected GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The NVML index.
      returned: always
      type: int
      sample: 0
    uuid:
      description: The GPU UUID.
      returned: always
      type: str
      sample: GPU-5c6d7e8f-1111-4222-8333-444455556666
    pci_bus_id:
      description: The PCI address.
      returned: always
      type: str
      sample: "0000:07:00.0"
    name:
      description: The model name.
      returned: always
      type: str
      sample: NVIDIA A100-SXM4-40GB
    changes:
      description: The settings that were (in check mode, would be) changed, with their values before and after.
      returned: always
      type: list
      elements: dict
      sample: [{"setting": "power_limit", "before": 400.0, "after": 300.0}]
    settings:
      description: The managed settings as they are after the run (in check mode, as they would be).
      returned: always
      type: dict
      sample: {"power_limit": 300.0, "ecc": {"current": true, "pending": false}}
    pending:
      description: ECC and MIG mode changes that wait for a GPU reset or a reboot.
      returned: always
      type: list
      elements: dict
      sample: [{"setting": "ecc", "current": true, "pending": false}]
    processes:
      description: The processes running on the GPU; they keep it from being reset.
      returned: always
      type: list
      elements: dict
      sample: [{"pid": 5150, "name": "trainer", "gpu_instance_id": 1, "compute_instance_id": 0}]
    processes_error:
      description:
        - Null when the processes were read. Otherwise why they could not be (then RV(gpus[].processes) is empty but
          not known to be); the GPU is not reset and no MIG instance is destroyed without knowing it is idle.
      returned: always
      type: str
      sample: null
reboot_required:
  description: Whether a selected GPU has an ECC or MIG mode change pending, which a reboot makes take effect.
  returned: always
  type: bool
  sample: true
reset_required:
  description:
    - Whether a selected GPU has a pending change and no process on it, so that a GPU reset (O(reset_gpus=true))
      would make the change take effect now.
  returned: always
  type: bool
  sample: false
reasons:
  description: One sentence per pending change, naming the processes that keep a GPU from being reset.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): ECC mode change pending (enabled -> disabled); it takes effect after a GPU reset or a reboot"
applied:
  description: What was changed, in order. Empty in check mode.
  returned: always
  type: list
  elements: str
  sample: ["GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): power_limit 400.0 -> 300.0"]
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files, _settings, _settings_apply, _validate
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import STATE_NO_GPU, STATE_OK


# The settings options live with the planner, which gpu_settings' check of its spec runs on the controller too.
def argument_spec() -> dict[str, t.Any]:
    return dict(
        _settings.settings_options(),
        reset_gpus=dict(type="bool", default=False),
        state_path=dict(type="path", default=_files.RUN_STATE_DIR + "/nvidia_smi_settings.json"),
    )


def _write_record(module: AnsibleModule, path: str, record: dict[str, t.Any]) -> None:
    try:
        _files.write_json_record(module, path, record, "state_path")
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)


def _fail(module: AnsibleModule, errors: list[str], **result: t.Any) -> t.NoReturn:
    module.fail_json(msg="; ".join(errors), errors=errors, **result)


def _nothing_done(source: str | None) -> dict[str, t.Any]:
    """The result keys of a run that changed nothing (without msg)."""
    return {k: v for k, v in _settings.empty_result(STATE_OK, "", source, []).items() if k != "msg"}


def _failed_applying(module: AnsibleModule, exc: _settings_apply.ApplyError, backend: _settings_apply.Backend) -> t.NoReturn:
    done = exc.done or backend.done
    module.fail_json(msg=str(exc), applied=done, changed=bool(done))


def _apply(
    module: AnsibleModule, backend: _settings_apply.Backend, host: dict[str, t.Any], record: dict[str, t.Any], state_path: str
) -> dict[t.Any, dict[str, t.Any]]:
    """Apply the plans, keep the record of the locked clocks applied, and read the GPUs again (by index)."""
    new_record = dict(record)
    try:
        _settings_apply.apply_plans(backend, host["selected"], host["plans"], new_record)
    except _settings_apply.ApplyError as exc:
        if new_record != record:
            _write_record(module, state_path, new_record)
        _failed_applying(module, exc, backend)
    if new_record != record:
        _write_record(module, state_path, new_record)
    return {view["index"]: view for view in backend.read(new_record)["views"]}


def main() -> None:
    module = _validate.ansible_module(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    # Everything that can be checked without a GPU is checked first: a bad value is bad on every host.
    errors = _settings.check_params(params)
    if errors:
        _fail(module, errors)
    desired = _settings.desired_from_params(params)
    try:
        record = _files.read_json_record(params["state_path"], "state_path").data
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    smi_binary = module.get_bin_path("nvidia-smi")

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C", "LANGUAGE": "C"})
        return rc, out, err

    after = None
    # One NVML session for the read, the changes and the read after them. It is closed before a GPU reset, which
    # nvidia-smi refuses while another NVML client (this one) holds the GPU.
    with _settings_apply.Session() as session:
        current = _settings_apply.read_state(session, run, smi_binary, record)
        if current["state"] != STATE_OK:
            result = _settings.empty_result(current["state"], current["message"], None, current["messages"])
            if current["state"] in _settings.QUIET_STATES:
                module.exit_json(skipped=True, **result)
            module.fail_json(**result)
        source, backend = current["source"], current["backend"]
        host = _settings.plan_host(desired, current["views"], params, source, current["messages"], bool(smi_binary))
        if host["skip"]:
            module.exit_json(skipped=True, **_settings.empty_result(STATE_NO_GPU, host["skip"], source, current["messages"]))
        if host["errors"]:
            _fail(module, host["errors"], **_nothing_done(source))
        if host["changed"] and not module.check_mode:
            after = _apply(module, backend, host, record, params["state_path"])
    if host["to_reset"] and not module.check_mode:
        try:
            for gpu in host["to_reset"]:
                _settings_apply.reset_gpu(run, smi_binary, gpu)
                backend.done.append("%s: GPU reset" % _settings.gpu_label(gpu))
        except _settings_apply.ApplyError as exc:
            _failed_applying(module, exc, backend)
    outcome = _settings.report(host, after, module.check_mode)
    module.exit_json(
        changed=host["changed"],
        state=STATE_OK,
        msg=outcome["msg"],
        source=source,
        messages=current["messages"] + outcome["notes"],
        gpus=outcome["gpus"],
        reboot_required=outcome["reboot_required"],
        reset_required=outcome["reset_required"],
        reasons=outcome["reasons"],
        applied=backend.done if host["changed"] and not module.check_mode else [],
        diff=_settings.summarize(host["plans"]),
    )


if __name__ == "__main__":
    main()
