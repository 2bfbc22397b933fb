# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planners: merge the NVIDIA runtime into Docker's daemon.json, containerd's config and a CRI-O drop-in.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Nothing here touches the host. Each planner takes the current file text (None when the file does not exist) and the
request, and returns the text the file must hold. A file that cannot be parsed raises ``RuntimeConfigError`` naming the
file and the parse error, so the caller fails before it writes anything. Content that already says what is asked is
returned byte for byte, so that a merge never reformats a file it does not need to change.
"""

from __future__ import annotations

import copy
import json
import re
import typing as t

try:  # Python 3.11+
    import tomllib as _toml_reader
except ImportError:  # pragma: no cover - older Pythons on managed hosts
    try:
        import tomli as _toml_reader  # type: ignore[no-redef]
    except ImportError:
        _toml_reader = None  # type: ignore[assignment]

RUNTIMES = ("docker", "containerd", "crio")
HAS_TOML = _toml_reader is not None
# The CRI plugin that holds the runtimes, per containerd config version (2: containerd 1.x, 3: containerd 2.x).
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_V2 = "io.containerd.runc.v2"


class RuntimeConfigError(Exception):
    """A request or an existing file that the planners cannot use; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------------------------------- Docker
def docker_merge(text: str | None, path: str, name: str, runtime_path: str, default_runtime: bool = False,
                 cdi: bool | None = None) -> str:
    """daemon.json with the ``name`` runtime (and optionally default-runtime and features.cdi); other keys kept."""
    current: dict[str, t.Any] = {}
    if text is not None and text.strip():
        try:
            current = json.loads(text)
        except ValueError as exc:
            raise RuntimeConfigError(
                "%s is not valid JSON (%s); it was not changed. Fix the file or move it away, then run again." % (path, exc)
            ) from exc
        if not isinstance(current, dict):
            raise RuntimeConfigError("%s must hold a JSON object, not %s; it was not changed." % (path, type(current).__name__))
    merged = copy.deepcopy(current)
    runtimes = merged.get("runtimes")
    if runtimes is None:
        runtimes = merged["runtimes"] = {}
    if not isinstance(runtimes, dict):
        raise RuntimeConfigError("%s: \"runtimes\" must be a JSON object; it was not changed." % path)
    entry = runtimes.get(name, {})
    if not isinstance(entry, dict):
        raise RuntimeConfigError("%s: \"runtimes\".%s must be a JSON object, not %s; it was not changed."
                                 % (path, json.dumps(name), type(entry).__name__))
    entry = dict(entry)
    entry["path"] = runtime_path
    runtimes[name] = entry
    if default_runtime:
        merged["default-runtime"] = name
    elif merged.get("default-runtime") == name:
        del merged["default-runtime"]
    if cdi is not None:
        features = merged.get("features")
        if features is None:
            features = merged["features"] = {}
        if not isinstance(features, dict):
            raise RuntimeConfigError("%s: \"features\" must be a JSON object; it was not changed." % path)
        features["cdi"] = bool(cdi)
    if merged == current and text is not None and text.strip():
        return text
    return json.dumps(merged, indent=4) + "\n"


# ------------------------------------------------------------------------------------------------------------ TOML tools
def parse_toml(text: str | None, path: str) -> dict[str, t.Any]:
    """The document, {} for a missing or empty file; RuntimeConfigError naming the file on a parse error."""
    if text is None or not text.strip():
        return {}
    if _toml_reader is None:
        raise RuntimeConfigError(
            "Reading %s needs a TOML parser: Python 3.11+ (tomllib) or the tomli library on the managed host" % path
        )
    try:
        return _toml_reader.loads(text)
    except Exception as exc:  # tomllib.TOMLDecodeError, or tomli's
        raise RuntimeConfigError("%s is not valid TOML (%s); it was not changed." % (path, exc)) from exc


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: t.Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are valid TOML escapes
    if isinstance(value, list):
        return "[" + ", ".join(_value(item, where) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join("%s = %s" % (_key(k), _value(v, where)) for k, v in value.items()) + "}"
    raise RuntimeConfigError("%s: cannot write a %s value as TOML" % (where, type(value).__name__))


def dump_toml(doc: dict[str, t.Any], header: str = "") -> str:
    """TOML text for a document of tables, scalars and lists (what containerd and CRI-O drop-ins hold)."""
    lines: list[str] = [header.rstrip("\n")] if header else []

    def table(prefix: list[str], data: dict[str, t.Any]) -> None:
        scalars = [(k, v) for k, v in data.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
        if prefix and (scalars or not tables):
            lines.append("")
            lines.append("[%s]" % ".".join(_key(p) for p in prefix))
        for k, v in scalars:
            lines.append("%s%s = %s" % ("  " * min(len(prefix), 1), _key(k), _value(v, ".".join(prefix + [k]))))
        for k, v in tables:
            table(prefix + [k], v)

    table([], doc)
    return "\n".join(lines).lstrip("\n") + "\n"


def _deep_merge(base: dict[str, t.Any], extra: dict[str, t.Any]) -> dict[str, t.Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ------------------------------------------------------------------------------------------------------------ containerd
def containerd_version(main: dict[str, t.Any], requested: int | None, path: str) -> int:
    """The config version of the drop-in: the requested one, else the main config's, else 2 (containerd 1.x)."""
    version = requested if requested else main.get("version", 2)
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise RuntimeConfigError(
            "%s has config version %r; this role writes containerd drop-ins for versions 2 (containerd 1.x) and 3 "
            "(containerd 2.x). Set nvidia_container_toolkit_containerd_config_version." % (path, version)
        )
    return int(version)


def _table(doc: dict[str, t.Any], keys: t.Sequence[str], path: str) -> dict[str, t.Any]:
    """The table at ``keys`` ({} when absent). RuntimeConfigError naming the file and the key when it is not a table."""
    current: t.Any = doc
    for depth, key in enumerate(keys):
        current = current.get(key, {})
        if not isinstance(current, dict):
            dotted = ".".join(_key(k) for k in keys[:depth + 1])
            raise RuntimeConfigError("%s: %s must be a table, not %s (%r); it was not changed. Fix the file, then run again."
                                     % (path, dotted, type(current).__name__, current))
    return current


def containerd_dropin(main: dict[str, t.Any], version: int, name: str, runtime_path: str,
                      default_runtime: bool = False, path: str = "the containerd config") -> dict[str, t.Any]:
    """The drop-in document.

    containerd 1.x replaces a plugin's whole table with the one an imported file has, so the drop-in carries a copy
    of the main config's CRI plugin table with the runtime added; the main config's CRI settings (sandbox image,
    runc options, ...) therefore survive the import. The runtime inherits runc's options (SystemdCgroup) and runs
    ``runtime_path``.
    """
    plugin = CRI_PLUGIN[version]
    cri = copy.deepcopy(_table(main, ("plugins", plugin), path))
    runtimes = _table(main, ("plugins", plugin, "containerd", "runtimes"), path)
    runc = _table(main, ("plugins", plugin, "containerd", "runtimes", "runc"), path)
    options = dict(_table(main, ("plugins", plugin, "containerd", "runtimes", "runc", "options"), path))
    existing = runtimes.get(name)
    if existing is not None and not isinstance(existing, dict):
        raise RuntimeConfigError("%s: plugins.%s.containerd.runtimes.%s must be a table, not %s; it was not changed."
                                 % (path, _key(plugin), _key(name), type(existing).__name__))
    runtime_type = runc.get("runtime_type", RUNC_V2)
    if not isinstance(runtime_type, str):
        raise RuntimeConfigError("%s: plugins.%s.containerd.runtimes.runc.runtime_type must be a string, not %r; it was not changed."
                                 % (path, _key(plugin), runtime_type))
    options["BinaryName"] = runtime_path
    runtime = {"runtime_type": runtime_type, "options": options}
    add: dict[str, t.Any] = {"containerd": {"runtimes": {name: runtime}}}
    if default_runtime:
        add["containerd"]["default_runtime_name"] = name
    merged = _deep_merge(cri, add)
    if not default_runtime and merged.get("containerd", {}).get("default_runtime_name") == name:
        del merged["containerd"]["default_runtime_name"]
    return {"version": version, "plugins": {plugin: merged}}


_TABLE_LINE = re.compile(r"^\s*\[")
_IMPORTS = re.compile(r"^imports\s*=\s*\[[^\]]*\]", re.MULTILINE)


def containerd_main(text: str | None, main: dict[str, t.Any], path: str, imports_glob: str, version: int) -> str:
    """The main config with ``imports_glob`` in its top-level ``imports``; every other line is kept as it is."""
    imports = main.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise RuntimeConfigError("%s: imports must be a list of paths, not %r; it was not changed." % (path, imports))
    if imports_glob in imports:
        return text if text is not None else ""
    new_line = "imports = %s" % _value(list(imports) + [imports_glob], "imports")
    if text is None or not text.strip():
        return "version = %d\n%s\n" % (version, new_line)
    lines = text.splitlines(keepends=True)
    # The top-level part of the file ends at its first table header.
    end = next((i for i, line in enumerate(lines) if _TABLE_LINE.match(line)), len(lines))
    top = "".join(lines[:end])
    rest = "".join(lines[end:])
    if imports:
        match = _IMPORTS.search(top)
        if match is None:  # pragma: no cover - tomllib saw a top-level imports that the pattern does not
            raise RuntimeConfigError("%s: cannot find the top-level imports line to extend; add %s to it by hand" % (path, imports_glob))
        top = top[:match.start()] + new_line + top[match.end():]
    else:
        version_line = re.search(r"^version\s*=.*$", top, re.MULTILINE)
        if version_line:
            top = top[:version_line.end()] + "\n" + new_line + top[version_line.end():]
        else:
            top = new_line + "\n" + top
    if top and not top.endswith("\n"):
        top += "\n"
    return top + rest


# ----------------------------------------------------------------------------------------------------------------- CRI-O
def crio_dropin(name: str, runtime_path: str, default_runtime: bool = False) -> dict[str, t.Any]:
    runtime: dict[str, t.Any] = {"runtimes": {name: {"runtime_path": runtime_path, "runtime_type": "oci"}}}
    if default_runtime:
        runtime = {"default_runtime": name, **runtime}
    return {"crio": {"runtime": runtime}}


# ------------------------------------------------------------------------------------------------------------ whole plan
DROPIN_HEADER = "# Written by Ansible (gpuhost.nvidia.nvidia_container_runtime); changes here are replaced on the next run.\n"


def check_request(runtimes: t.Iterable[str]) -> list[str]:
    """Errors for runtime names this module does not know."""
    unknown = [r for r in runtimes if r not in RUNTIMES]
    if unknown:
        return ["unknown container runtime(s) %s: choose from %s" % (", ".join(map(repr, unknown)), ", ".join(RUNTIMES))]
    return []
