# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The containerd template of k3s and RKE2 (role k8s_gpu_node): which file, what it holds, and when to refuse.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

k3s and RKE2 render containerd's ``config.toml`` on every start, from a template in the same directory when there is
one (docs/sources.md, "The Kubernetes GPU worker's host side"): ``config-v3.toml.tmpl`` on the releases that embed
containerd 2.x (k3s/RKE2 v1.31.6+, v1.32.2+, 1.33 and later), else ``config.toml.tmpl``. A template may start with
``{{ template "base" . }}`` (since v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1) to keep the distribution's own
configuration and add tables after it. The rendered file must stay valid TOML, which refuses a table defined twice: a
template that extends the base can add new tables only, never a key to a table the base writes (the CRI plugin's
``enable_cdi``, the ``default_runtime_name``, a runtime the distribution adds itself).

So the plan writes a template only when it has a table to add: a runtime the distribution does not add itself (k3s
adds ``nvidia`` from ``nvidia-container-runtime`` on its PATH). Everything else is said, not written: CDI is on by
default in containerd 2.x; containerd 1.7's switch sits in the base's CRI table; the default runtime is the
distribution's ``default-runtime`` setting. A template that is not the role's is never overwritten; a version that
cannot be read, or predates the base template, refuses (a full template would freeze the distribution's defaults).

Nothing here touches the host: the role passes the texts it read and the ``<dist> --version`` output.
"""

from __future__ import annotations

import os
import re
import typing as t
from collections.abc import Mapping

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime

DISTRIBUTIONS = ("k3s", "rke2")
TEMPLATE_V2 = "config.toml.tmpl"
TEMPLATE_V3 = "config-v3.toml.tmpl"
RENDERED = "config.toml"
# The distribution's systemd units (server and agent); the one that runs renders the template when it starts.
UNITS = {"k3s": ("k3s", "k3s-agent"), "rke2": ("rke2-server", "rke2-agent")}
# The distribution's own config file, where its default-runtime setting goes.
CONFIG_FILE = {"k3s": "/etc/rancher/k3s/config.yaml", "rke2": "/etc/rancher/rke2/config.yaml"}

# The first patch release of each minor with {{ template "base" . }} (k3s PR 7991, the September 2023 releases; RKE2's
# releases of the same numbers pin those k3s commits); every minor after 1.28 has it.
BASE_SINCE = {(1, 24): 17, (1, 25): 13, (1, 26): 8, (1, 27): 5, (1, 28): 1}
BASE_SINCE_TEXT = "v1.24.17, v1.25.13, v1.26.8, v1.27.5, v1.28.1 or any later minor"
# The first patch release of each minor that embeds containerd 2.0 (the February 2025 releases); 1.33 and later all do.
CONTAINERD2_SINCE = {(1, 31): 6, (1, 32): 2}
CONTAINERD2_SINCE_TEXT = "v1.31.6, v1.32.2 or 1.33 and later"

# The runtimes k3s adds itself when their binary is on its PATH at start (pkg/agent/containerd/runtimes.go): the name,
# and the binary it looks for. A template may not define them again.
AUTO_RUNTIMES = {
    "nvidia": "nvidia-container-runtime",
    "nvidia-experimental": "nvidia-container-runtime-experimental",
    "nvidia-cdi": "nvidia-container-runtime.cdi",
    "crun": "crun",
    "lunatic": "containerd-shim-lunatic-v1",
    "slight": "containerd-shim-slight-v1",
    "spin": "containerd-shim-spin-v2",
    "wws": "containerd-shim-wws-v1",
    "wasmedge": "containerd-shim-wasmedge-v1",
    "wasmer": "containerd-shim-wasmer-v1",
    "wasmtime": "containerd-shim-wasmtime-v1",
}
# The base template's own runtime.
BASE_RUNTIMES = ("runc",)
# The directories of a systemd service's default PATH, where k3s's PATH lookup finds a packaged runtime.
SERVICE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

HEADER_MARK = "# Written by gpuhost.nvidia.k8s_gpu_node"
BASE_LINE = '{{ template "base" . }}'
# k3s's own extra runtimes take the cgroup driver the kubelet uses from the template's data (templates.go).
SYSTEMD_CGROUP = "{{ .SystemdCgroup }}"

_VERSION = re.compile(r"\b(k3s|rke2) version v(\d+)\.(\d+)\.(\d+)")


def template_dir(distribution: str) -> str:
    return "/var/lib/rancher/%s/agent/etc/containerd" % distribution


def paths(distribution: str) -> dict[str, str]:
    """The template files and the rendered config of ``distribution``, by name."""
    base = template_dir(distribution)
    return {name: os.path.join(base, name) for name in (TEMPLATE_V2, TEMPLATE_V3, RENDERED)}


def parse_version(text: t.Any, distribution: str) -> tuple[int, int, int] | None:
    """(1, 31, 6) from ``k3s version v1.31.6+k3s1 (6ab750f9)``; None when the text names no version of ``distribution``."""
    match = _VERSION.search(text) if isinstance(text, str) else None
    if match is None or match.group(1) != distribution:
        return None
    return int(match.group(2)), int(match.group(3)), int(match.group(4))


def has_base(version: tuple[int, int, int]) -> bool:
    """Whether a release of this version renders ``{{ template "base" . }}``."""
    minor = version[:2]
    if minor < (1, 24):
        return False
    if minor in BASE_SINCE:
        return version[2] >= BASE_SINCE[minor]
    return minor > (1, 28)


def embeds_containerd2(version: tuple[int, int, int]) -> bool:
    """Whether a release of this version embeds containerd 2.x (and reads ``config-v3.toml.tmpl``)."""
    minor = version[:2]
    if minor in CONTAINERD2_SINCE:
        return version[2] >= CONTAINERD2_SINCE[minor]
    return minor >= (1, 33)


def is_ours(text: str | None) -> bool:
    return isinstance(text, str) and text.startswith(HEADER_MARK)


def header(distribution: str) -> str:
    return ("%s: %s's base template, then the runtime the role adds; state absent removes this file.\n"
            % (HEADER_MARK, distribution))


def rendered_version(text: str | None) -> int | None:
    """The config version of the distribution's rendered config.toml; None when missing or unreadable as TOML (it is
    the distribution's file: a problem in it is not the role's to fail on)."""
    try:
        doc = _runtime.parse_toml(text, RENDERED)
    except _runtime.RuntimeConfigError:
        return None
    version = doc.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def rendered_cdi(text: str | None, version: int) -> t.Any:
    """``enable_cdi`` of the CRI plugin in the rendered config.toml: True, False, or None when it does not say."""
    try:
        doc = _runtime.parse_toml(text, RENDERED)
    except _runtime.RuntimeConfigError:
        return None
    plugin = (doc.get("plugins") or {}).get(_runtime.CRI_PLUGIN[version]) if isinstance(doc.get("plugins"), dict) else None
    value = plugin.get("enable_cdi") if isinstance(plugin, dict) else None
    return value if isinstance(value, bool) else None


def runtime_toml(version: int, name: str, runtime_path: str) -> str:
    """The runtime's tables, in the shape k3s gives its own extra runtimes: runc's shim running ``runtime_path``, with
    the template's SystemdCgroup value. Only new tables, so the base's tables are never defined twice."""
    cri = _runtime.CRI_PLUGIN[version]
    entry = {"runtime_type": _runtime.RUNC_V2, "options": {"BinaryName": runtime_path}}
    doc = {"plugins": {cri: {"containerd": {"runtimes": {name: entry}}}}}
    # dump_toml writes a table's scalars before its sub-tables, so the options table comes last: the Go template's
    # SystemdCgroup line goes into it.
    return _runtime.dump_toml(doc) + "  SystemdCgroup = %s\n" % SYSTEMD_CGROUP


def template_text(distribution: str, version: int, name: str, runtime_path: str) -> str:
    return "%s%s\n\n%s" % (header(distribution), BASE_LINE, runtime_toml(version, name, runtime_path))


def _runtime_added_by_distribution(name: str, runtime_path: str) -> bool:
    binary = AUTO_RUNTIMES.get(name)
    return binary is not None and os.path.basename(runtime_path) == binary and os.path.dirname(runtime_path) in SERVICE_PATH


def plan(request: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The template files to write and remove on a k3s or RKE2 node.

    ``request``: distribution (k3s or rke2), state (present or absent), runtime_name, runtime_path, default_runtime,
    version_text (the ``<dist> --version`` output, or None when it could not run) and version_problem (why not),
    files ({name: text or None} for config.toml.tmpl, config-v3.toml.tmpl and config.toml, as the host holds them).

    Returns {distribution, files (per template path, the text to write, or None to remove it: only paths to change),
    keep (paths left as they are), template (the path the plan writes, or None), config_version, version, engines
    (the units for the restart policy, each with the template paths), errors, messages}. ``errors`` non-empty: nothing may be written.
    """
    distribution = request["distribution"]
    where = paths(distribution)
    texts = {name: (request.get("files") or {}).get(name) for name in where}
    templates = (TEMPLATE_V2, TEMPLATE_V3)
    # For the restart policy: the units, and the files whose change since a unit started makes it due a restart.
    engines = [{"name": unit, "files": [where[n] for n in templates]} for unit in UNITS[distribution]]
    result: dict[str, t.Any] = {"distribution": distribution, "files": {}, "keep": [], "template": None,
                                "config_version": None, "version": None, "engines": engines,
                                "errors": [], "messages": []}
    foreign = [where[n] for n in templates if texts[n] is not None and not is_ours(texts[n])]

    if request["state"] == "absent":
        result["files"] = {where[n]: None for n in templates if is_ours(texts[n])}
        result["keep"] = foreign
        if foreign:
            result["messages"].append("%s left as they are: not written by the role" % ", ".join(foreign))
        return result

    errors: list[str] = result["errors"]
    messages: list[str] = result["messages"]
    for path in foreign:
        errors.append(
            "%s is not the role's (its first line is not '%s ...'), and %s renders containerd's config from it: the role "
            "never overwrites it. Add what the role would add to it yourself (after %s), or move it away, then run "
            "again" % (path, HEADER_MARK, distribution, BASE_LINE))
    version = parse_version(request.get("version_text"), distribution)
    if version is None:
        errors.append(
            "cannot tell which %s runs here (%s --version: %s). The template extends %s's base template (%s), which "
            "%s has since %s; put the %s binary on the PATH of the remote user, then run again"
            % (distribution, distribution, request.get("version_problem") or repr(request.get("version_text")), distribution,
               BASE_LINE, distribution, BASE_SINCE_TEXT, distribution))
    else:
        result["version"] = "%d.%d.%d" % version
        if not has_base(version):
            errors.append(
                "%s v%s predates %s (%s has it since %s); the role does not write a full template, which would freeze "
                "this release's defaults: upgrade %s, then run again" % (distribution, result["version"], BASE_LINE,
                                                                         distribution, BASE_SINCE_TEXT, distribution))
    name, runtime_path = request["runtime_name"], request["runtime_path"]
    if name in BASE_RUNTIMES:
        errors.append("k8s_gpu_node_runtime_name: %s is the runtime %s's base template defines; choose another name, "
                      "such as nvidia" % (name, distribution))
    elif name in AUTO_RUNTIMES and not _runtime_added_by_distribution(name, runtime_path):
        errors.append(
            "k8s_gpu_node_runtime_name: %s is a runtime %s adds itself (from %s on its PATH), so the template may not "
            "define it again (containerd refuses a table defined twice). For the runtime at %s choose another name, or "
            "install it as %s/%s" % (name, distribution, AUTO_RUNTIMES[name], runtime_path, "/usr/bin", AUTO_RUNTIMES[name]))
    if request.get("default_runtime"):
        errors.append(
            "k8s_gpu_node_default_runtime: %s sets containerd's default runtime itself, in a table its base template "
            "writes; set default-runtime: %s in %s (%s's own setting) and leave k8s_gpu_node_default_runtime false"
            % (distribution, name, CONFIG_FILE[distribution], distribution))
    if errors or version is None:
        return result

    config_version = 3 if embeds_containerd2(version) or (rendered_version(texts[RENDERED]) or 0) >= 3 else 2
    result["config_version"] = config_version
    wanted = TEMPLATE_V3 if config_version >= 3 else TEMPLATE_V2
    content = None
    if _runtime_added_by_distribution(name, runtime_path):
        messages.append("%s adds the %s runtime itself when it finds %s on its PATH at start: no template needed for it"
                        % (distribution, name, runtime_path))
    else:
        content = template_text(distribution, config_version, name, runtime_path)
        result["template"] = where[wanted]
        messages.append("%s: %s's base template, then the %s runtime (%s)" % (where[wanted], distribution, name, runtime_path))
    cdi = rendered_cdi(texts[RENDERED], config_version)
    if cdi is True or (config_version >= 3 and cdi is None):
        messages.append("CDI: on in %s v%s's containerd (containerd 2.x has it on by default; spec dirs /etc/cdi, "
                        "/var/run/cdi)" % (distribution, result["version"]) if cdi is None else
                        "CDI: on in %s's rendered %s" % (distribution, where[RENDERED]))
    else:
        why = ("%s turns it off (enable_cdi = false)" % where[RENDERED] if cdi is False else
               "containerd 1.7, which %s v%s embeds, has it off by default" % (distribution, result["version"]))
        messages.append(
            "CDI not enabled: %s, and enable_cdi sits in the CRI plugin table %s's base template writes, which a "
            "template extending the base cannot change (TOML refuses a table defined twice); GPUs reach pods through "
            "the nvidia runtime. %s %s runs containerd 2.x, with CDI on"
            % (why, distribution, distribution, CONTAINERD2_SINCE_TEXT))
    for name_ in templates:
        path, text = where[name_], texts[name_]
        target = content if name_ == wanted else None
        if text != target and (text is not None or target is not None):
            result["files"][path] = target
    return result
