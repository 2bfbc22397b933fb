# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic of gpu_container_check: how to request GPUs from an engine, and what the container saw vs the facts.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Nothing here talks to the engine; the module passes in ``docker info`` as a dict and the container's exit code and
output as text, so unit tests need neither the docker SDK nor an engine.
"""

from __future__ import annotations

import re
import typing as t
from urllib.parse import urlsplit

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _validate

REQUESTS = ("auto", "gpus", "runtime", "cdi")
NO_GPU = "no GPU visible in the container"

_GPU_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)\s*$")


# The module's option rules, checked before the engine is asked anything; the gpu_verify role checks its variables by
# the same rules in its first task (module_utils/_role_inputs.py).
_DOCKER_HOST_RE = re.compile(r"(unix|tcp|ssh|http|https)://[A-Za-z0-9_.:/@%\[\]~+-]+")
_IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")
_DEVICE_ID_RE = re.compile(r"(\d{1,2}|GPU-[0-9a-fA-F-]{36}|MIG-[A-Za-z0-9/-]{1,80})")
_HOST_NAME_RE = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")


def docker_host_problem(address: str) -> str | None:
    """Why ``address`` (already of _DOCKER_HOST_RE's characters) is not an engine address; None when it is.

    unix:// takes an absolute socket path; tcp://, http://, https:// and ssh:// take a host, and a port from 1 to 65535
    when one is given.
    """
    scheme, _sep, rest = address.partition("://")
    if scheme == "unix":
        return None if rest.startswith("/") and "//" not in rest[1:] else "unix:// takes an absolute socket path, as in unix:///var/run/docker.sock"
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as exc:
        return "is not a valid address: %s" % exc
    host = parts.hostname or ""
    netloc_host = parts.netloc.rsplit("@", 1)[-1]
    if not host or not _HOST_NAME_RE.fullmatch(netloc_host.rsplit(":", 1)[0] if not netloc_host.startswith("[") else netloc_host.split("]")[0] + "]"):
        return "names no host: give %s://HOST:PORT" % scheme
    if port is not None and not 1 <= port <= 65535:
        return "has port %d; a port is from 1 to 65535" % port
    if netloc_host.endswith(":"):
        return "has an empty port after the colon"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "has a path, query or fragment after the host; give %s://HOST:PORT" % scheme
    return None


class DockerHost(_validate.Text):
    """An engine address: the characters of _DOCKER_HOST_RE, then :func:`docker_host_problem`."""

    def __init__(self) -> None:
        super().__init__(max_length=512, pattern=_DOCKER_HOST_RE,
                         what="an engine address such as unix:///var/run/docker.sock or tcp://host:2376")

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        problem = docker_host_problem(value)
        if problem is not None:
            raise _validate.InputError(option, value, problem)


OPTION_RULES: dict[str, _validate.Rule] = {
    "docker_host": DockerHost(),
    "timeout": _validate.Integer(1, 3600, "an hour"),
    "image": _validate.Text(max_length=512, pattern=_IMAGE_RE, what="an image reference such as nvidia/cuda:12.4.1-base-ubuntu22.04"),
    "command": _validate.ListOf(_validate.Text(empty=True, max_length=4096, space=True, ascii_only=False), min_items=1, max_items=64),
    "device_ids": _validate.ListOf(_validate.Text(max_length=128, pattern=_DEVICE_ID_RE, what="a GPU index, a GPU UUID or a MIG UUID"),
                                   max_items=64),
    "runtime_name": _validate.Identifier(_validate.ENGINE_RUNTIME_RE, "a runtime name such as nvidia"),
    "cdi_kind": _validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu"),
}


class VerifyError(Exception):
    """A request the engine cannot serve; the message names why and the fix."""


def engine_summary(info: dict[str, t.Any], runtime_name: str = "nvidia") -> dict[str, t.Any]:
    """What matters from ``docker info``: the runtimes, the default, and CDI (Docker 25+ lists CDISpecDirs when enabled)."""
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi_dirs = info.get("CDISpecDirs") or []
    return {
        "server": "%s %s" % (info.get("OperatingSystem") or info.get("Name") or "engine", info.get("ServerVersion") or "?"),
        "runtimes": runtimes,
        "default_runtime": info.get("DefaultRuntime"),
        "nvidia_runtime": runtime_name in runtimes,
        "cdi_enabled": bool(cdi_dirs),
        "cdi_spec_dirs": list(cdi_dirs),
    }


def choose_request(request: str, engine: dict[str, t.Any], runtime_name: str = "nvidia") -> tuple[str, list[str]]:
    """The request mode to use, and notes. Raises VerifyError when the engine cannot serve the mode asked for.

    auto: the nvidia runtime when the engine knows it, else CDI when enabled, else an error naming both.
    gpus: Docker's ``--gpus`` device request; the engine does not advertise whether it can serve one, so no check.
    """
    notes: list[str] = []
    if request == "auto":
        if engine["nvidia_runtime"]:
            return "runtime", ["the engine knows the %s runtime" % runtime_name]
        if engine["cdi_enabled"]:
            return "cdi", ["CDI is enabled (spec dirs %s)" % ", ".join(engine["cdi_spec_dirs"])]
        raise VerifyError(
            "the engine (%s) knows no %s runtime (runtimes: %s) and has CDI disabled: configure the NVIDIA Container Toolkit "
            "(nvidia-ctk runtime configure, or features.cdi in daemon.json) and restart the engine"
            % (engine["server"], runtime_name, ", ".join(engine["runtimes"]) or "none")
        )
    if request == "runtime" and not engine["nvidia_runtime"]:
        raise VerifyError(
            "the engine (%s) knows no %s runtime (runtimes: %s): run nvidia-ctk runtime configure --runtime=docker and restart it"
            % (engine["server"], runtime_name, ", ".join(engine["runtimes"]) or "none")
        )
    if request == "cdi" and not engine["cdi_enabled"]:
        raise VerifyError(
            "CDI is not enabled in the engine (%s): set features.cdi to true in daemon.json (Docker 25+) and restart it" % engine["server"]
        )
    if request == "gpus":
        notes.append(
            "a --gpus device request; the engine does not say whether it can serve one%s"
            % ("" if engine["nvidia_runtime"] else " and knows no %s runtime" % runtime_name)
        )
    return request, notes


def container_options(mode: str, device_ids: list[str], runtime_name: str = "nvidia", cdi_kind: str = "nvidia.com/gpu") -> dict[str, t.Any]:
    """Keyword arguments for the container: a device request, a runtime with NVIDIA_VISIBLE_DEVICES, or CDI names.

    ``device_requests`` is returned as plain dicts (the Engine API's DeviceRequest); the module turns them into
    docker.types.DeviceRequest.
    """
    ids = [str(d) for d in device_ids]
    if mode == "gpus":
        request = {"Driver": "", "Count": 0 if ids else -1, "DeviceIDs": ids or None, "Capabilities": [["gpu"]]}
        return {"device_requests": [request], "environment": {}}
    if mode == "runtime":
        return {"runtime": runtime_name, "environment": {"NVIDIA_VISIBLE_DEVICES": ",".join(ids) if ids else "all"}}
    if mode == "cdi":
        names = ["%s=%s" % (cdi_kind, d) for d in ids] if ids else ["%s=all" % cdi_kind]
        return {"device_requests": [{"Driver": "cdi", "Count": 0, "DeviceIDs": names, "Capabilities": None}], "environment": {}}
    raise ValueError("unknown request mode %r" % mode)


def parse_list(output: str) -> dict[str, t.Any]:
    """``nvidia-smi -L`` output -> {gpus: [{index, name, uuid}], mig: [{profile, device, uuid, gpu_uuid}]}."""
    gpus: list[dict[str, t.Any]] = []
    mig: list[dict[str, t.Any]] = []
    for line in (output or "").splitlines():
        match = _GPU_LINE.match(line.rstrip())
        if match:
            gpus.append({"index": int(match.group(1)), "name": match.group(2), "uuid": match.group(3)})
            continue
        match = _MIG_LINE.match(line.rstrip())
        if match and gpus:
            mig.append({"profile": match.group(1), "device": int(match.group(2)), "uuid": match.group(3), "gpu_uuid": gpus[-1]["uuid"]})
    return {"gpus": gpus, "mig": mig}


def expected_gpus(facts: dict[str, t.Any], device_ids: list[str]) -> list[dict[str, t.Any]]:
    """The host GPUs the container should see: those NVML/nvidia-smi listed (not PCI-only), narrowed by device_ids."""
    gpus = [g for g in facts.get("gpus") or [] if g.get("index") is not None and g.get("uuid")]
    if not device_ids:
        return gpus
    wanted = {str(d) for d in device_ids}
    return [g for g in gpus if str(g["index"]) in wanted or g["uuid"] in wanted]


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def compare(facts: dict[str, t.Any], exit_code: int | None, output: str, device_ids: list[str] | None = None) -> dict[str, t.Any]:
    """Pass/fail with a reason: the GPUs the container listed against the host's facts."""
    device_ids = device_ids or []
    seen = parse_list(output)
    expected = expected_gpus(facts, device_ids)
    want = [g["uuid"] for g in expected]
    got = [g["uuid"] for g in seen["gpus"]]
    result = {"passed": False, "reason": "", "container_gpus": seen["gpus"], "container_mig_devices": seen["mig"], "expected_uuids": want}
    host_note = "the host's facts list %d GPU(s) (state %s)" % (len(want), facts.get("state"))
    if not got:
        detail = _first_line(output)
        how = "nvidia-smi exited %s" % exit_code if exit_code not in (None, 0) else "nvidia-smi listed no GPU"
        result["reason"] = "%s: %s%s; %s" % (NO_GPU, how, ": %s" % detail if detail else "", host_note)
        return result
    if exit_code not in (None, 0):
        result["reason"] = "nvidia-smi -L exited %s although it listed %d GPU(s): %s" % (exit_code, len(got), _first_line(output))
        return result
    missing = [u for u in want if u not in got]
    extra = [u for u in got if u not in want]
    if missing or extra:
        parts = ["the container sees %d GPU(s), %s" % (len(got), host_note)]
        if missing:
            parts.append("not visible in the container: %s" % ", ".join(missing))
        if extra:
            parts.append("not in the host's facts: %s" % ", ".join(extra))
        result["reason"] = "; ".join(parts)
        return result
    result["passed"] = True
    result["reason"] = "the container sees the %d expected GPU(s): %s" % (len(got), ", ".join(got))
    return result


def start_failure(message: str, command: list[str]) -> str:
    """A readable reason for a container that would not start."""
    text = message or ""
    if "executable file not found" in text or "no such file or directory" in text.lower() and command and command[0] in text:
        return "%s: %s is not in the image and the runtime injected no driver tools (%s)" % (NO_GPU, command[0], _first_line(text))
    if "unknown or invalid runtime" in text or "unknown runtime" in text:
        return "the engine refused the runtime: %s" % _first_line(text)
    if "could not select device driver" in text:
        return "the engine has no GPU device driver for the --gpus request (is the NVIDIA Container Toolkit installed?): %s" % _first_line(text)
    return "the container did not start: %s" % _first_line(text)
