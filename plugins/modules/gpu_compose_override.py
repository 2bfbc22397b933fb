#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_compose_override
short_description: Write a compose override file that gives services NVIDIA GPUs
version_added: 0.1.0
description:
  - Writes a compose override file, for example C(docker-compose.gpu.yml), that gives the listed services GPUs. Use it
    next to the project's own compose file, as in C(docker compose -f compose.yml -f docker-compose.gpu.yml up).
  - Each service gets a device reservation (C(deploy.resources.reservations.devices)) for the C(nvidia) or C(cdi)
    driver, C(NVIDIA_VISIBLE_DEVICES) and C(CUDA_VISIBLE_DEVICES) that match the devices chosen, optional environment
    presets, and optional runtime settings (C(ipc), C(shm_size), C(ulimits), C(runtime)).
  - Devices are chosen explicitly, or placed on the host's GPUs by a strategy that reads the GPU facts from
    M(gpuhost.nvidia.nvidia_gpu_facts). Requests that the host cannot meet fail before anything is written, and the
    message names the shortfall.
  - Services in an existing override file that the task does not list are kept, unless O(prune=true). A listed service's
    entry is replaced as a whole by the generated one. Comments in the file are not kept.
  - The file is written atomically, only when its content changes, and keeps its mode and owner.
  - O(state=absent) removes the entries of the services listed (only their O(services[].name) is read) and keeps every
    other service and top-level key. The module records in O(record) the text the file held before its first change;
    when the remaining document is the recorded original, the original's exact bytes (comments included) are written
    back, and when nothing remains the file is removed.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - PyYAML on the managed host (C(python3-yaml) on Debian and Ubuntu, C(python3-pyyaml) on RHEL, C(python-yaml) on Arch).
  - For O(validate=true), C(docker compose) (v2) or C(docker-compose) on the managed host.
extends_documentation_fragment:
  - ansible.builtin.files
  - gpuhost.nvidia.facts
attributes:
  check_mode:
    support: full
    description: Computes the document and the diff, and validates it when asked, without touching the file.
  diff_mode:
    support: full
    description: Shows the file before and after.
  safe_file_operations:
    support: full
    description: Writes through a temporary file and M(ansible.builtin.copy)'s atomic move.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  path:
    description:
      - The override file to write. Its directory must exist.
      - An absolute path of printable ASCII without C(.) or C(..) components. A directory, a special file, a symbolic
        link to nothing or a path under a file is refused, naming it; so is an existing file that is not a compose
        mapping in UTF-8 YAML.
    type: path
    required: true
  services:
    description:
      - The services to give GPUs. Each entry becomes the whole entry of that service in the override file.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The compose service name (letters, digits, C(.), C(_) and C(-), at most 128 characters).
        type: str
        required: true
      count:
        description:
          - How many GPUs. A number from 1 to 64 (no host has more), or V(all).
          - With O(services[].driver=cdi) and O(strategy=explicit) only V(all), because CDI names devices and has no count.
          - With O(strategy=explicit) and neither O(services[].count) nor O(services[].device_ids), the service gets
            V(all) GPUs. With the other strategies the default is V(1).
          - Mutually exclusive with O(services[].device_ids).
        type: raw
      device_ids:
        description:
          - The devices, only with O(strategy=explicit). Each is a GPU index (V(0)), a GPU UUID (V(GPU-...)), a MIG
            device as C(GPU:N) (V(0:1)) or by UUID (V(MIG-...)), or with O(services[].driver=cdi) a CDI device name
            (V(nvidia.com/gpu=0)).
          - When O(facts) are given every id must exist on the host, and the ids are written as UUIDs (see O(id_format)).
          - A MIG device on a GPU whose MIG mode is off is an error, and so is a whole GPU whose MIG mode is on (the
            message names its MIG devices to ask for instead), as the placement strategies never place one.
          - Indices and MIG references are below 64; other ids are printable ASCII of at most 256 characters.
        type: list
        elements: raw
      driver:
        description:
          - The device driver for the reservation. V(cdi) writes CDI device names (O(cdi_kind)=NAME) and needs a
            Docker engine with CDI enabled and a CDI spec that has those names.
        type: str
        choices: [nvidia, cdi]
        default: nvidia
      capabilities:
        description:
          - The device capabilities to reserve. V(gpu) selects the GPU driver, the others are NVIDIA driver capabilities.
        type: list
        elements: str
        choices: [gpu, compute, utility, graphics, video, display]
        default: [gpu]
      memory_mib:
        description:
          - The GPU memory the service needs on each of its GPUs, in MiB.
          - Required with O(strategy=pack). With the other placement strategies, only GPUs with at least this much
            memory are chosen. At most 1048576 (1 TiB).
        type: int
      environment_presets:
        description:
          - Sets of well-known variables, applied in the order given. O(services[].environment) wins over all of them.
          - V(nvidia) sets C(NVIDIA_DRIVER_CAPABILITIES) from O(services[].capabilities).
          - V(cuda) sets C(CUDA_DEVICE_ORDER=PCI_BUS_ID), C(CUDA_CACHE_PATH), C(CUDA_CACHE_MAXSIZE) and
            C(CUDA_MODULE_LOADING=LAZY).
          - V(cudnn) sends cuDNN errors to stderr (C(CUDNN_LOGERR_DBG), C(CUDNN_LOGDEST_DBG)).
          - V(pytorch) sets C(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) and C(PYTORCH_NVML_BASED_CUDA_CHECK=1).
          - V(tensorflow) sets C(TF_FORCE_GPU_ALLOW_GROWTH=true) and C(TF_CPP_MIN_LOG_LEVEL=1).
        type: list
        elements: str
        choices: [nvidia, cuda, cudnn, pytorch, tensorflow]
        default: []
      environment:
        description:
          - Extra variables. They win over the presets and over the computed C(NVIDIA_VISIBLE_DEVICES) and
            C(CUDA_VISIBLE_DEVICES).
          - Values are strings, numbers or booleans (written as strings; V(true) as C(true)); a list or mapping, and
            a string with control characters, are refused.
        type: dict
        default: {}
      ipc:
        description: The IPC mode, for example V(host) for NCCL between containers.
        type: str
      shm_size:
        description: The size of C(/dev/shm), as a byte count or a size such as V(8g).
        type: raw
      ulimits:
        description:
          - Ulimits, each a number (V(-1) is unlimited) or a mapping with C(soft) and C(hard). NVIDIA recommends
            C(memlock) V(-1) and C(stack) V(67108864) for deep learning containers.
        type: dict
      runtime:
        description:
          - The container runtime, for example V(nvidia) on hosts where Docker's default runtime is not the NVIDIA one.
          - Letters, digits, C(.), C(_) and C(-).
        type: str
  strategy:
    description:
      - How services get their GPUs. Only whole GPUs with MIG off, and not bound to a passthrough driver, are placed.
      - V(explicit) uses O(services[].device_ids) or O(services[].count) as given.
      - V(spread) hands out GPUs round-robin, so the services share them evenly.
      - V(pack) fills GPUs by O(services[].memory_mib), largest request first, each on the fullest GPU that still fits.
      - V(exclusive) gives every service GPUs of its own; no GPU is shared.
      - The placement strategies need O(facts) and fail, naming the shortfall, when the host has too few GPUs.
    type: str
    choices: [explicit, spread, pack, exclusive]
    default: explicit
  id_format:
    description:
      - How to write devices when O(facts) are given. V(uuid) is stable; indices can change order between boots.
      - A device the facts have no UUID for is written by index, with a warning.
    type: str
    choices: [uuid, index]
    default: uuid
  cdi_kind:
    description: The CDI vendor and class used to name devices with O(services[].driver=cdi).
    type: str
    default: nvidia.com/gpu
  vm_mode:
    description:
      - For a host (usually a VM with a GPU passed through with vfio-pci) where the NVIDIA container runtime does not
        inject the GPUs. Each service then gets C(privileged=true), a device mapping for every C(/dev/nvidia*) node in
        the facts, read-only bind mounts of C(libnvidia-ml.so) and C(libcuda.so) (the soname path and the versioned
        file of the driver version in the facts), C(NVIDIA_DRIVER_CAPABILITIES=all) and C(NVIDIA_DISABLE_REQUIRE=1),
        and no device reservation.
      - The module warns that the services run privileged.
      - Fails, naming what is missing, when the facts lack the driver version, a library path or the device nodes.
        Paths are never guessed.
    type: bool
    default: false
  state:
    description:
      - V(present) writes the services' entries; V(absent) removes them (see the description).
    type: str
    choices: [present, absent]
    default: present
  record:
    description:
      - A JSON file recording, per override file, the text it held before this module first changed it (null when it
        did not exist). Read by O(state=absent), which drops the file's entry; removed when empty.
    type: path
    default: /var/lib/gpuhost/gpu_compose_override.json
  prune:
    description:
      - Take the whole file. Services and top-level keys that the task does not list are removed.
    type: bool
    default: false
  backup:
    description: Keep a timestamped copy of the file before replacing it.
    type: bool
    default: false
  validate:
    description:
      - Check the merged project with C(docker compose config) (or C(docker-compose config)) before replacing the file.
        The new content is written to a temporary file and validated together with O(compose_files).
      - Fails when no compose binary is found.
    type: bool
    default: false
  compose_files:
    description:
      - The project's own compose files, merged before the override by O(validate=true) and read for GPU requests of
        the managed services by O(base_requests=refuse).
      - Defaults to C(compose.yaml), C(compose.yml), C(docker-compose.yaml) or C(docker-compose.yml) in the
        directory of O(path), whichever exists first.
      - A relative path is relative to the directory of O(path). Paths may not hold C(.) or C(..) components.
    type: list
    elements: path
    default: []
  request_form:
    description:
      - Where each service's GPU request is written. V(deploy) is the long form,
        C(deploy.resources.reservations.devices), which every Compose version reads. V(gpus) is the service-level
        C(gpus) attribute of the compose specification, which Docker Compose v2 reads (Compose v1 refuses it); Compose
        turns both into the same device requests.
      - Not used with O(vm_mode=true), which writes no GPU request.
    type: str
    choices: [deploy, gpus]
    default: deploy
    version_added: 0.2.0
  base_requests:
    description:
      - What to do when the project's own compose file (O(compose_files)) already requests GPUs for a managed service.
        Compose appends sequences when it merges files, so such a request survives the override and the service gets
        more GPUs than the override grants.
      - V(refuse) reads the project's compose files before anything is written and fails naming each such service,
        file and request. It writes plain YAML that every Compose version reads. A file that cannot be read or parsed
        fails the task too, since what it requests is unknown.
      - V(replace) writes the service's request with the C(!override) tag and resets the other form with
        C(!reset []), so the merged project holds exactly the override's request whatever the base file says. The
        tags need Docker Compose 2.24.4 or later; Compose v1 cannot read the file.
    type: str
    choices: [refuse, replace]
    default: refuse
    version_added: 0.2.0
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - name: Compose GPU support
    description: The device reservation syntax that this module writes.
    link: https://docs.docker.com/compose/how-tos/gpu-support/
  - name: NVIDIA Container Toolkit environment variables
    description: NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES and NVIDIA_DISABLE_REQUIRE.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html
notes:
  - The compose binary runs as an argument list with C(LC_ALL=C), and its project directory is the directory of O(path).
  - O(facts) are needed by the placement strategies, by O(vm_mode), and to check and translate
    O(services[].device_ids). The driver library paths are read from C(driver.library_paths), and for each library
    that has no path there (a missing or null key, as the facts report a library they did not find) from a top-level
    C(library_paths); keys may be V(nvml) and V(cuda), or the sonames V(libnvidia-ml.so.1) and V(libcuda.so.1).
  - GPU indices (0 to 63), GPU and MIG UUIDs, device nodes (C(/dev/nvidia*)), library paths and the driver version
    taken from O(facts) are checked before they are written.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  gpuhost.nvidia.nvidia_gpu_facts:

- name: Give the trainer two GPUs of its own and the notebook one more
  gpuhost.nvidia.gpu_compose_override:
    path: /srv/ml/docker-compose.gpu.yml
    facts: "{{ ansible_facts.nvidia_gpu }}"
    strategy: exclusive
    services:
      - name: trainer
        count: 2
        environment_presets: [nvidia, cuda, pytorch]
        ipc: host
        shm_size: 16g
        ulimits:
          memlock: -1
          stack: 67108864
      - name: notebook
        capabilities: [gpu, compute, utility]
    validate: true
    backup: true

- name: Pin a service to a MIG device, by UUID
  gpuhost.nvidia.gpu_compose_override:
    path: /srv/infer/docker-compose.gpu.yml
    facts: "{{ ansible_facts.nvidia_gpu }}"
    services:
      - name: infer
        device_ids: ["0:1"]

- name: Use CDI device names
  gpuhost.nvidia.gpu_compose_override:
    path: /srv/app/docker-compose.gpu.yml
    services:
      - name: app
        driver: cdi
        device_ids: [nvidia.com/gpu=all]

- name: Inside a VM with a passed-through GPU and no container toolkit
  gpuhost.nvidia.gpu_compose_override:
    path: /srv/app/docker-compose.gpu.yml
    facts: "{{ ansible_facts.nvidia_gpu }}"
    vm_mode: true
    services:
      - name: app
        count: all
"""

RETURN = r"""
path:
  description: The override file.
  returned: always
  type: str
  sample: /srv/ml/docker-compose.gpu.yml
services:
  description: The generated entry of each managed service, as written to the file.
  returned: success
  type: dict
  sample:
    trainer:
      deploy:
        resources:
          reservations:
            devices:
              - driver: nvidia
                capabilities: [gpu]
                device_ids: [GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001]
      environment:
        CUDA_VISIBLE_DEVICES: GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001
        NVIDIA_VISIBLE_DEVICES: GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001
assignment:
  description:
    - The devices each service got, exactly as the file's device reservation holds them (CDI device names with
      O(services[].driver=cdi)). V(all) for all GPUs; an empty list when a bare count lets the engine choose.
  returned: success
  type: dict
  sample:
    trainer: [GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001, GPU-8b0e6c1d-51f4-4a54-8d2e-0c9f3e7b4002]
    notebook: [GPU-d0a5e4b2-6c1e-4f4e-b4a8-1e2f3a4b5003]
removed:
  description: Whether O(state=absent) removed (or in check mode would remove) the file, because nothing was left in it.
  returned: success
  type: bool
  sample: false
unmanaged_services:
  description: Services in the file that the task does not manage, kept as they were. Empty with O(prune=true).
  returned: success
  type: list
  elements: str
  sample: [sidecar]
document:
  description: The whole override document that the file holds after the run.
  returned: success
  type: dict
  sample:
    services:
      sidecar:
        image: busybox
backup_file:
  description: The backup copy, when O(backup=true) and the file was replaced.
  returned: changed and O(backup=true)
  type: str
  sample: /srv/ml/docker-compose.gpu.yml.12345.2025-01-01@10:00:00~
validated_with:
  description: The compose command that validated the merged project, or null when nothing was validated.
  returned: success
  type: list
  elements: str
  sample: [/usr/bin/docker-compose, -f, /srv/ml/docker-compose.yml, -f, /srv/ml/.docker-compose.gpu.yml.x1.tmp, config, -q]
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose, _compose_cli, _files, _gpu_schema, _validate

SERVICE_SPEC: dict[str, t.Any] = dict(
    name=dict(type="str", required=True),
    count=dict(type="raw"),
    device_ids=dict(type="list", elements="raw"),
    driver=dict(type="str", choices=list(_compose.DRIVERS), default="nvidia"),
    capabilities=dict(type="list", elements="str", choices=list(_compose.CAPABILITIES), default=["gpu"]),
    memory_mib=dict(type="int"),
    environment_presets=dict(type="list", elements="str", choices=sorted(_compose.PRESETS), default=[]),
    environment=dict(type="dict", default={}),
    ipc=dict(type="str"),
    shm_size=dict(type="raw"),
    ulimits=dict(type="dict"),
    runtime=dict(type="str"),
)
DEFAULT_RECORD = _files.STATE_DIR + "/gpu_compose_override.json"
# Checked before the host is read; the services themselves are checked by _compose.build, also before any read.
RULES: dict[str, _validate.Rule] = {
    "path": _validate.Path(),
    "compose_files": _validate.ListOf(_validate.Path(relative=True), max_items=32),
    "cdi_kind": _validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu"),
    "record": _validate.Path(),
}


def absent(module: AnsibleModule, path: str, record_path: str) -> None:
    """state=absent: the listed services' entries go; the user's bytes come back where nothing else changed."""
    names = [svc["name"] for svc in module.params["services"]]
    errors = _compose.check_service_names(names)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    try:
        record = _files.read_originals(record_path)
        before = _files.read_bytes(path, "path")
        text = before.decode("utf-8") if before is not None else None
        document, wanted = _compose.absent(text, names, path, record)
        content = to_bytes(wanted) if wanted is not None else None
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    except UnicodeDecodeError as exc:
        module.fail_json(msg="the existing override file %s is not UTF-8 text (%s); fix or remove it" % (path, exc), path=path)
    except _compose.ComposeError as exc:
        module.fail_json(msg=str(exc), path=path)
    new_record = {k: v for k, v in record.items() if k != path}
    result: dict[str, t.Any] = dict(changed=False, path=path, removed=False, services={}, assignment={},
                                    unmanaged_services=_compose.unmanaged(document, {}), document=_compose.plain(document),
                                    validated_with=None, diff={"before": "", "after": ""})
    try:
        if before is not None and content is None:
            result.update(changed=True, removed=True, document={},
                          diff={"before": text, "after": "", "before_header": path, "after_header": "%s (absent)" % path})
            if not module.check_mode:
                if module.params["backup"]:
                    result["backup_file"] = module.backup_local(path)
                _files.remove(path, "path")
        elif before is not None and content != before:
            outcome = _files.write_file(module, path, content, backup=module.params["backup"])
            result.update(changed=outcome.changed, diff=outcome.diff)
            if outcome.backup_file:
                result["backup_file"] = outcome.backup_file
        _files.write_originals(module, record_path, record, new_record)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    result["changed"] = result["changed"] or new_record != record
    module.exit_json(**result)


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            path=dict(type="path", required=True),
            services=dict(type="list", elements="dict", required=True, options=SERVICE_SPEC),
            strategy=dict(type="str", choices=list(_compose.STRATEGIES), default="explicit"),
            id_format=dict(type="str", choices=list(_compose.ID_FORMATS), default="uuid"),
            cdi_kind=dict(type="str", default=_compose.DEFAULT_CDI_KIND),
            facts=dict(type="dict"),
            vm_mode=dict(type="bool", default=False),
            prune=dict(type="bool", default=False),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            record=dict(type="path", default=DEFAULT_RECORD),
            backup=dict(type="bool", default=False),
            validate=dict(type="bool", default=False),
            compose_files=dict(type="list", elements="path", default=[]),
            request_form=dict(type="str", choices=list(_compose.REQUEST_FORMS), default="deploy"),
            base_requests=dict(type="str", choices=list(_compose.BASE_REQUEST_POLICIES), default="refuse"),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    if not _compose.HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=_compose.YAML_IMPORT_ERROR)

    params = module.params
    # mode, owner and group too: AnsibleModule applies them only after the file is written.
    errors = _validate.check(params, RULES) + _files.file_args_errors(params)
    facts_error = _gpu_schema.facts_error(params["facts"]) if params["facts"] is not None else None
    if facts_error:
        errors.append(facts_error)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    path = os.path.abspath(params["path"])
    record_path = os.path.abspath(params["record"])
    if params["state"] == "absent":
        absent(module, path, record_path)
    request = {
        "strategy": params["strategy"],
        "id_format": params["id_format"],
        "cdi_kind": params["cdi_kind"],
        "vm_mode": params["vm_mode"],
        "services": params["services"],
        "request_form": params["request_form"],
        "base_requests": params["base_requests"],
    }

    # Plan: everything is computed and checked before the file is touched; the request before the host is read.
    try:
        plan = _compose.build(request, params["facts"])
    except _compose.ComposeError as exc:
        module.fail_json(msg=str(exc), path=path)
    if params["base_requests"] == "refuse" and not params["vm_mode"]:
        _compose_cli.refuse_base_requests(module, path, params["compose_files"], plan.services)
    try:
        existing_bytes = _files.read_bytes(path, "path")
        existing = _compose.parse(existing_bytes.decode("utf-8"), path) if existing_bytes is not None else None
        document = _compose.merge(existing, plan.services, prune=params["prune"], source=path)
        content = to_bytes(_compose.render(document))
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=path)
    except UnicodeDecodeError as exc:
        module.fail_json(msg="the existing override file %s is not UTF-8 text (%s); fix or remove it" % (path, exc), path=path)
    except _compose.ComposeError as exc:
        module.fail_json(msg=str(exc), path=path)

    for warning in plan.warnings:
        module.warn(warning)
    if params["vm_mode"]:
        module.warn(
            "vm_mode: services %s run privileged (privileged: true), with every /dev/nvidia* node and the host's driver "
            "libraries mapped in" % ", ".join(sorted(plan.services))
        )

    validator = _compose_cli.Validator(module, path, params["compose_files"]) if params["validate"] else None
    try:
        record = _files.read_originals(record_path)
        before = to_text(existing_bytes) if existing_bytes is not None else None
        after = before if content == existing_bytes else to_text(content)
        new_record = _files.note_originals(record, [(path, before, after)], "present")
        _files.write_originals(module, record_path, record, new_record)  # before the file: it must know the original
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    outcome = _files.write_file(module, path, content, backup=params["backup"], validate=validator, validate_unchanged=True)
    result: dict[str, t.Any] = dict(
        changed=outcome.changed,
        path=path,
        services=_compose.plain(plan.services),
        assignment=plan.assignment,
        unmanaged_services=_compose.unmanaged(document, plan.services),
        document=_compose.plain(document),
        validated_with=validator.used if validator else None,
        diff=outcome.diff,
    )
    if outcome.backup_file:
        result["backup_file"] = outcome.backup_file
    module.exit_json(**result)


if __name__ == "__main__":
    main()
