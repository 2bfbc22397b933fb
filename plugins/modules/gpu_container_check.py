#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_container_check
short_description: Prove that a container sees the host's NVIDIA GPUs, through the Docker Engine API
version_added: 0.1.0
description:
  - Asks the engine (through the C(docker) Python SDK) which runtimes it knows and whether CDI is enabled, then runs a
    short-lived container from O(image) that requests GPUs the way the host is configured (O(request)), runs
    O(command) (C(nvidia-smi -L)) in it, and compares the GPU UUIDs it lists with the host's O(facts).
  - The result is RV(passed) with a RV(reason). A container that lists no GPU gives the reason
    C(no GPU visible in the container), followed by what C(nvidia-smi) said.
  - The image is never pulled when it is present. When it is absent and O(pull=never) (air-gapped hosts), the check
    fails and says how to load it.
  - The container is always removed, also when it failed to start.
  - Works against Docker and against podman's Docker-compatible API (C(podman system service)). Podman 4 accepts
    device requests and unknown runtime names in its compat API and ignores them, so there the container sees no GPU
    and the check fails with that reason.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - The C(docker) Python SDK 5.0 or newer on the managed host (C(python3-docker) on Debian and Ubuntu).
extends_documentation_fragment:
  - gpuhost.nvidia.facts
attributes:
  check_mode:
    support: full
    description: >-
      The check only reads the engine's state and runs a container that it removes again; check mode runs it too, so
      that a check-mode run reports the same result. Only a pull (O(pull=missing) and the image absent) is skipped in
      check mode, and the result then says so.
  diff_mode:
    support: none
    description: Nothing on the host is changed.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with a Docker-compatible engine.
options:
  docker_host:
    description:
      - The engine's API address, C(unix://) with an absolute socket path, or C(tcp://), C(ssh://), C(http://) or
        C(https://) with a host and an optional port from 1 to 65535, and nothing after them.
      - Every option is checked before the engine is asked anything; a bad value fails the task, naming the option
        and the value.
    type: str
    default: unix:///var/run/docker.sock
  timeout:
    description: Seconds to wait for the engine and for the container to finish, from 1 to 3600.
    type: int
    default: 60
  image:
    description: The image to run; a CUDA base image has C(nvidia-smi) injected by the NVIDIA runtime.
    type: str
    default: nvidia/cuda:12.4.1-base-ubuntu22.04
  pull:
    description: V(missing) pulls the image when absent; V(never) fails when it is absent.
    type: str
    choices: [missing, never]
    default: missing
  command:
    description: The command run in the container. Its output must be in the format of C(nvidia-smi -L).
    type: list
    elements: str
    default: [nvidia-smi, -L]
  request:
    description:
      - How the container asks for GPUs.
      - V(gpus) is a device request, as C(docker run --gpus all).
      - V(runtime) uses the O(runtime_name) runtime with C(NVIDIA_VISIBLE_DEVICES), as C(docker run --runtime nvidia).
      - V(cdi) requests CDI device names (O(cdi_kind)=V(all), or the O(device_ids)), as C(docker run --device nvidia.com/gpu=all).
      - V(auto) uses V(runtime) when the engine knows O(runtime_name), else V(cdi) when CDI is enabled, and otherwise
        fails, naming the runtimes the engine knows.
    type: str
    choices: [auto, gpus, runtime, cdi]
    default: auto
  device_ids:
    description: GPU indices or UUIDs to request instead of all GPUs. The container must then see exactly those.
    type: list
    elements: str
    default: []
  runtime_name:
    description: The NVIDIA runtime's name in the engine.
    type: str
    default: nvidia
  cdi_kind:
    description: The CDI vendor and class of the NVIDIA GPUs.
    type: str
    default: nvidia.com/gpu
  facts:
    required: true
  fail_on_mismatch:
    description: Fail the task when the check does not pass. With V(false) read RV(passed) and RV(reason).
    type: bool
    default: true
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - module: gpuhost.nvidia.nvidia_gpu_doctor
  - name: NVIDIA Container Toolkit, running a sample workload
    description: The C(docker run --gpus all ... nvidia-smi) check this module automates.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/sample-workload.html
"""

EXAMPLES = r"""
- name: Gather the GPU facts
  gpuhost.nvidia.nvidia_gpu_facts:

- name: Prove a container sees every GPU, without pulling (air-gapped)
  gpuhost.nvidia.gpu_container_check:
    facts: "{{ ansible_facts.nvidia_gpu }}"
    image: registry.example.com/nvidia/cuda:12.4.1-base-ubuntu22.04
    pull: never
    request: gpus
"""

RETURN = r"""
passed:
  description: Whether the container saw exactly the expected GPUs.
  returned: always
  type: bool
  sample: false
reason:
  description: Why it passed or failed.
  returned: always
  type: str
  sample: "no GPU visible in the container: nvidia-smi exited 9: NVIDIA-SMI has failed ...; the host's facts list 0 GPU(s) (state no_gpu)"
engine:
  description: What the engine said about itself. Null when it could not be reached.
  returned: always
  type: dict
  sample: {server: "Debian GNU/Linux 12 4.3.1", runtimes: [runc, nvidia], default_runtime: runc, nvidia_runtime: true, cdi_enabled: false, cdi_spec_dirs: []}
request:
  description: The request mode used (V(gpus), V(runtime) or V(cdi)), null when none could be chosen.
  returned: always
  type: str
  sample: runtime
notes:
  description: Remarks on the request and the image.
  returned: always
  type: list
  elements: str
  sample: ["the engine knows the nvidia runtime", "image present, not pulled"]
image_pulled:
  description: Whether the image was pulled.
  returned: always
  type: bool
  sample: false
exit_code:
  description: The container's exit code; null when it did not run.
  returned: always
  type: int
  sample: 0
output:
  description: What the container printed (stdout and stderr).
  returned: always
  type: str
  sample: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a1b2c3d-0000-4000-8000-000000000000)"
container_gpus:
  description: The GPUs the container listed.
  returned: always
  type: list
  elements: dict
  sample: [{index: 0, name: NVIDIA H100 80GB HBM3, uuid: GPU-0a1b2c3d-0000-4000-8000-000000000000}]
expected_uuids:
  description: The GPU UUIDs from the facts that the container should list.
  returned: always
  type: list
  elements: str
  sample: [GPU-0a1b2c3d-0000-4000-8000-000000000000]
"""

import traceback
import typing as t

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_schema, _validate, _verify

try:
    import docker
    from docker import errors as docker_errors
    from docker import types as docker_types

    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()

MIN_DOCKER = (5, 0)
LABEL = "io.gpuhost.nvidia.check"


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


# What the SDK raises when the engine cannot be reached or answers nonsense: its own errors, requests' (OSErrors) and
# urllib3's address errors (ValueErrors). Each ends the check with a reason, never a traceback.
ENGINE_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError)
# Checked before the engine is asked anything (module_utils/_verify.py: the gpu_verify role checks its variables by the
# same rules in its first task).
RULES: dict[str, _validate.Rule] = _verify.OPTION_RULES


def run_container(client: t.Any, image: str, command: list[str], options: dict[str, t.Any], timeout: int) -> tuple[int | None, str, str | None]:
    """Create, start, wait, read the logs, remove. Returns (exit code, output, start error)."""
    kwargs: dict[str, t.Any] = {"environment": options.get("environment") or {}, "labels": {LABEL: "1"}, "detach": True}
    if options.get("runtime"):
        kwargs["runtime"] = options["runtime"]
    if options.get("device_requests"):
        kwargs["device_requests"] = [
            docker_types.DeviceRequest(
                driver=r["Driver"], count=r["Count"], device_ids=r["DeviceIDs"], capabilities=r["Capabilities"]
            )
            for r in options["device_requests"]
        ]
    container = None
    try:
        container = client.containers.create(image, command, **kwargs)
        try:
            container.start()
        except docker_errors.APIError as exc:
            return None, "", str(getattr(exc, "explanation", None) or exc)
        status = container.wait(timeout=timeout)
        code = status.get("StatusCode") if isinstance(status, dict) else status
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return code, output, None
    except (docker_errors.DockerException,) + ENGINE_ERRORS as exc:
        return None, "", str(getattr(exc, "explanation", None) or exc)
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except (docker_errors.DockerException,) + ENGINE_ERRORS:
                pass


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            timeout=dict(type="int", default=60),
            image=dict(type="str", default="nvidia/cuda:12.4.1-base-ubuntu22.04"),
            pull=dict(type="str", choices=["missing", "never"], default="missing"),
            command=dict(type="list", elements="str", default=["nvidia-smi", "-L"]),
            request=dict(type="str", choices=list(_verify.REQUESTS), default="auto"),
            device_ids=dict(type="list", elements="str", default=[]),
            runtime_name=dict(type="str", default="nvidia"),
            cdi_kind=dict(type="str", default="nvidia.com/gpu"),
            facts=dict(type="dict", required=True),
            fail_on_mismatch=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    errors = _validate.check(module.params, RULES)
    facts_error = _gpu_schema.facts_error(module.params["facts"])
    if facts_error:
        errors.append(facts_error)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker (the Docker SDK for Python)"), exception=DOCKER_IMPORT_ERROR)
    if _version(docker.__version__) < MIN_DOCKER:
        module.fail_json(msg="the docker SDK %s is too old: device requests need 5.0 or newer" % docker.__version__)
    params = module.params
    result: dict[str, t.Any] = dict(
        changed=False, passed=False, reason="", engine=None, request=None, notes=[], image_pulled=False,
        exit_code=None, output="", container_gpus=[], expected_uuids=[],
    )

    def finish(reason: str | None = None) -> None:
        if reason is not None:
            result["reason"] = reason
        if not result["passed"] and params["fail_on_mismatch"]:
            module.fail_json(msg=result["reason"], **result)
        module.exit_json(**result)

    try:
        client = docker.DockerClient(base_url=params["docker_host"], timeout=params["timeout"], version="auto")
        info = client.info()
    except (docker_errors.DockerException,) + ENGINE_ERRORS as exc:
        finish("cannot reach the engine at %s: %s" % (params["docker_host"], exc))
    result["engine"] = engine = _verify.engine_summary(info, params["runtime_name"])

    try:
        mode, notes = _verify.choose_request(params["request"], engine, params["runtime_name"])
    except _verify.VerifyError as exc:
        finish(str(exc))
    result["request"] = mode
    result["notes"] = notes

    image = params["image"]
    try:
        client.images.get(image)
        notes.append("image %s present, not pulled" % image)
    except docker_errors.ImageNotFound:
        if params["pull"] == "never":
            finish(
                "the image %s is not present and pull=never: load it on the host (docker load -i / podman load -i) or "
                "point image at a local registry" % image
            )
        if module.check_mode:
            result["reason"] = "check mode: the image %s is absent and would be pulled first; the container was not run" % image
            module.exit_json(**result)
        try:
            client.images.pull(image)
        except (docker_errors.DockerException,) + ENGINE_ERRORS as exc:
            finish("the image %s is not present and pulling it failed: %s" % (image, getattr(exc, "explanation", None) or exc))
        result["image_pulled"] = True
    except (docker_errors.DockerException,) + ENGINE_ERRORS as exc:
        finish("the engine could not inspect the image %s: %s" % (image, getattr(exc, "explanation", None) or exc))

    options = _verify.container_options(mode, params["device_ids"], params["runtime_name"], params["cdi_kind"])
    code, output, start_error = run_container(client, image, params["command"], options, params["timeout"])
    result["exit_code"] = code
    result["output"] = output
    if start_error is not None:
        finish(_verify.start_failure(start_error, params["command"]))
    compared = _verify.compare(params["facts"], code, output, params["device_ids"])
    result.update(
        passed=compared["passed"], container_gpus=compared["container_gpus"], expected_uuids=compared["expected_uuids"]
    )
    finish(compared["reason"])


if __name__ == "__main__":
    main()
