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
import os
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
# The CRI plugin that holds the runtimes, per containerd config version (1 and 2: containerd 1.x; 3 and later: containerd
# 2.x), as upstream criRuntimePluginName has them.
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime", 4: "io.containerd.cri.v1.runtime"}
RUNC_V2 = "io.containerd.runc.v2"

# The engines' configuration files where nothing else is said: the one table of them. The nvidia_container_runtime
# module's defaults, the restart plan's and the doctor's read it; the roles' public defaults name the same paths, and
# tests/unit/toolkit/test_engine_paths.py holds them to this table.
DEFAULT_PATHS = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.conf",
}
CONTAINERD_CONF_DIR = "/etc/containerd/conf.d"
DEFAULT_CONTAINERD_DROPIN = CONTAINERD_CONF_DIR + "/99-nvidia.toml"
CRIO_DROPIN_NAME = "99-nvidia.conf"
# CRI-O's main configuration, which the drop-in's runtime table is checked against.
DEFAULT_CRIO_CONFIG = "/etc/crio/crio.conf"


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
    """The config version to write, which always follows the main (root) config.

    Like containerd and nvidia-ctk, a config that has content but no ``version`` key is version 1. A missing or empty
    config takes ``requested``, else 2 (containerd 1.x). containerd 2.3 refuses a drop-in whose version differs from
    its root config's, so a request that contradicts the root config is an error rather than a guess.
    """
    if not main:
        return int(requested) if requested else 2
    if "version" not in main and versionless_with_imports(main):
        # The file already imports drop-ins and holds nothing that only a version 1 reader understands: the drop-in
        # goes next to the others and its directory joins the imports (upstream config_drop_in_test.go
        # TestEnsureImports). containerd 1.7 and 2.x both resolve the imports of a file without a version line.
        return int(requested) if requested else 2
    version = main.get("version", 1)
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise RuntimeConfigError(
            "%s has config version %r; the versions this module writes are 1 (containerd 1.x, in place), 2 (containerd "
            "1.x), 3 and 4 (containerd 2.x). Fix the version line of the file; it was not changed." % (path, version)
        )
    if requested and requested != version:
        where = "has version = %d" % version if "version" in main else "has no version line, so containerd reads it as version 1"
        raise RuntimeConfigError(
            "%s %s, but config_version %d was requested; containerd refuses a drop-in whose version differs from the "
            "root config's. Leave config_version unset (0 in the role) to follow the file, or migrate the file first "
            "(containerd config migrate), then run again; it was not changed." % (path, where, requested)
        )
    return int(version)


def versionless_with_imports(main: dict[str, t.Any]) -> bool:
    """A main config without a ``version`` line that has ``imports`` and nothing version 1 spells differently: no
    ``plugins`` table (version 1 names them ``cri``, ...) and only URI plugin names in disabled_plugins and
    required_plugins. containerd 1.7 validates the merged config as version 2 once a drop-in says version 2
    (ValidateV2: every plugin key an io.containerd.x.vx URI), so a file with short names stays on the in-place path."""
    if "version" in main or not isinstance(main.get("imports"), list) or "plugins" in main:
        return False
    for key in ("disabled_plugins", "required_plugins"):
        names = main.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n.startswith("io.containerd.") for n in names):
            return False
    return True


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


def source_runtimes(default_name: t.Any, name: str) -> list[str]:
    """The runtimes whose settings the new runtime inherits, in nvidia-ctk's order: the engine's default runtime
    (unless it is an nvidia* runtime or the one being added), then runc, then crun (upstream engine.GetLowLevelRuntimes)."""
    names = []
    if isinstance(default_name, str) and default_name and not default_name.startswith("nvidia") and default_name != name:
        names.append(default_name)
    return names + [r for r in ("runc", "crun") if r not in names and r != name]


def inherited_runtime(doc: dict[str, t.Any], prefix: tuple[str, ...], default_name: t.Any, name: str,
                      path: str) -> tuple[str | None, dict[str, t.Any]]:
    """The name and a copy of the first runtime of ``source_runtimes`` under ``prefix`` (the runtimes table) in
    ``doc``; (None, {}) when there is none. Every table on the way must be a table (RuntimeConfigError naming the key)."""
    runtimes = _table(doc, prefix, path)
    for source in source_runtimes(default_name, name):
        if source in runtimes:
            entry = copy.deepcopy(_table(doc, prefix + (source,), path))
            _table(doc, prefix + (source, "options"), path)
            return source, entry
    return None, {}


def containerd_runtime(main: dict[str, t.Any], version: int, name: str, runtime_path: str, path: str) -> dict[str, t.Any]:
    """The runtime table: a copy of the first of the default runtime, runc and crun that the CRI table has (every key:
    runtime_type, options such as SystemdCgroup, privileged_without_host_devices, runtime_engine, runtime_root, ...),
    with an empty runtime_type replaced by io.containerd.runc.v2, and the binary set to ``runtime_path``."""
    prefix = ("plugins", CRI_PLUGIN[version], "containerd")
    default_name = _table(main, prefix, path).get("default_runtime_name")
    source, entry = inherited_runtime(main, prefix + ("runtimes",), default_name, name, path)
    if source is None:
        entry = {"runtime_type": RUNC_V2, "privileged_without_host_devices": False}
    runtime_type = entry.get("runtime_type", "")
    if not isinstance(runtime_type, str):
        raise RuntimeConfigError("%s: %s.runtime_type must be a string, not %r; it was not changed."
                                 % (path, ".".join(_key(k) for k in prefix + ("runtimes", str(source))), runtime_type))
    if not runtime_type:
        entry["runtime_type"] = RUNC_V2
    options = dict(entry.get("options", {}))
    options["BinaryName"] = runtime_path
    if version == 1:  # containerd 1.x's v1 config also reads the legacy Runtime key (upstream config_v1.go)
        options["Runtime"] = runtime_path
    entry["options"] = options
    return entry


def containerd_cri(main: dict[str, t.Any], version: int, name: str, runtime_path: str, default_runtime: bool = False,
                   cdi: bool | None = None, path: str = "the containerd config") -> dict[str, t.Any]:
    """The main config's CRI plugin table with the runtime added (and default_runtime_name, enable_cdi set)."""
    plugin = CRI_PLUGIN[version]
    cri = copy.deepcopy(_table(main, ("plugins", plugin), path))
    existing = _table(main, ("plugins", plugin, "containerd", "runtimes"), path).get(name)
    if existing is not None and not isinstance(existing, dict):
        raise RuntimeConfigError("%s: plugins.%s.containerd.runtimes.%s must be a table, not %s; it was not changed."
                                 % (path, _key(plugin), _key(name), type(existing).__name__))
    runtime = containerd_runtime(main, version, name, runtime_path, path)
    containerd = cri.setdefault("containerd", {})
    containerd.setdefault("runtimes", {})[name] = runtime
    if default_runtime:
        containerd["default_runtime_name"] = name
    elif containerd.get("default_runtime_name") == name:
        del containerd["default_runtime_name"]
    if cdi is not None:
        cri["enable_cdi"] = bool(cdi)
    return cri


def containerd_dropin(main: dict[str, t.Any], version: int, name: str, runtime_path: str,
                      default_runtime: bool = False, path: str = "the containerd config",
                      cdi: bool | None = None) -> dict[str, t.Any]:
    """The drop-in document (config versions 2 and up).

    containerd 1.x replaces a plugin's whole table with the one an imported file has, so the drop-in carries a copy
    of the main config's CRI plugin table with the runtime added; the main config's CRI settings (sandbox image,
    runc options, ...) therefore survive the import (upstream getBaseDropInConfigTree).
    """
    cri = containerd_cri(main, version, name, runtime_path, default_runtime, cdi, path)
    return {"version": version, "plugins": {CRI_PLUGIN[version]: cri}}


def containerd_v1(text: str | None, main: dict[str, t.Any], name: str, runtime_path: str, default_runtime: bool = False,
                  cdi: bool | None = None, path: str = "the containerd config") -> str:
    """A version 1 main config with the runtime added in place, as nvidia-ctk does: version 1 has no drop-ins.

    The file is rewritten (comments are lost, as with nvidia-ctk) only when its content changes; ``version = 1`` is
    written so that the file says what containerd reads it as.
    """
    cri = containerd_cri(main, 1, name, runtime_path, default_runtime, cdi, path)
    merged = copy.deepcopy(main)
    merged["version"] = 1
    merged.setdefault("plugins", {})[CRI_PLUGIN[1]] = cri
    if merged == main and text is not None:
        return text
    doc = {"version": 1, **{k: v for k, v in merged.items() if k != "version"}}
    return dump_toml(doc, "# Version 1 containerd config; gpuhost.nvidia.nvidia_container_runtime added the %s runtime.\n"
                     % name)


_TABLE_LINE = re.compile(r"^\s*\[")
_IMPORTS = re.compile(r"^imports\s*=\s*\[[^\]]*\]", re.MULTILINE)


# containerd's own drop-in directory: containerd 2.2 and later write it into the imports of the config that
# `containerd config default` prints (defaults/defaults_unix.go DefaultConfigIncludePattern). The daemon resolves only
# the imports a config file names (server/config/config.go LoadConfigWithPlugins) and reads no file when
# /etc/containerd/config.toml is missing (command/main.go), so a main config without the line still needs it.
CONTAINERD_DEFAULT_IMPORT = CONTAINERD_CONF_DIR + "/*.toml"


def same_import(entry: str, glob: str, path: str) -> bool:
    """Whether the imports entry ``entry`` of the main config at ``path`` names the same glob as ``glob``, the way
    containerd resolves it (resolveImports: filepath.Clean; a relative entry is relative to the main config's
    directory). ``conf.d/*.toml`` in /etc/containerd/config.toml is /etc/containerd/conf.d/*.toml."""
    if not isinstance(entry, str) or not entry:
        return False
    if not entry.startswith("/"):
        entry = os.path.join(os.path.dirname(path), entry)
    return os.path.normpath(entry) == os.path.normpath(glob)


def containerd_main(text: str | None, main: dict[str, t.Any], path: str, imports_glob: str, version: int) -> str:
    """The main config with ``imports_glob`` in its top-level ``imports``; every other line is kept as it is."""
    imports = main.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise RuntimeConfigError("%s: imports must be a list of paths, not %r; it was not changed." % (path, imports))
    if any(same_import(i, imports_glob, path) for i in imports):
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
def crio_dropin(name: str, runtime_path: str, default_runtime: bool = False,
                source: dict[str, t.Any] | None = None, path: str = "crio.conf") -> dict[str, t.Any]:
    """The drop-in document. The runtime inherits every setting of the first of crio.conf's default runtime, runc and
    crun that ``source`` (the parsed crio.conf) has (monitor_path, runtime_root, ...), then runs ``runtime_path`` as
    an ``oci`` runtime (upstream crio.go AddRuntime)."""
    entry: dict[str, t.Any] = {}
    if source:
        default_name = _table(source, ("crio", "runtime"), path).get("default_runtime")
        entry = inherited_runtime(source, ("crio", "runtime", "runtimes"), default_name, name, path)[1]
    entry["runtime_path"] = runtime_path
    entry["runtime_type"] = "oci"
    runtime: dict[str, t.Any] = {"runtimes": {name: entry}}
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


# --------------------------------------------------------------------------------------------------------------- removal
# state=absent takes out what the present state added. The module records, per file, the text the file held before
# its first change (None: it did not exist). With that record, every key the module touched goes back to the value
# the user had, tables it created and left empty go, and a result that parses to the recorded original is written as
# the original's exact bytes (or the file is removed when it did not exist). Without a record (a file changed by an
# older version, or by hand) only the runtime and a default that names it are removed.
_MISSING = object()


def _get(doc: t.Any, keys: t.Sequence[str]) -> t.Any:
    """The value at ``keys`` in ``doc``, or _MISSING."""
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return _MISSING
        doc = doc[key]
    return doc


def _pop(doc: dict[str, t.Any], keys: t.Sequence[str]) -> None:
    parent = _get(doc, keys[:-1])
    if isinstance(parent, dict):
        parent.pop(keys[-1], None)


def _put(doc: dict[str, t.Any], keys: t.Sequence[str], value: t.Any) -> None:
    for key in keys[:-1]:
        doc = doc.setdefault(key, {})
    doc[keys[-1]] = copy.deepcopy(value)


def _restore(doc: dict[str, t.Any], original: dict[str, t.Any] | None, keys: t.Sequence[str]) -> None:
    """Put back the original's value at ``keys``, or remove the key when the original had none."""
    value = _MISSING if original is None else _get(original, keys)
    if value is _MISSING:
        _pop(doc, keys)
    else:
        _put(doc, keys, value)


def _prune(doc: dict[str, t.Any], original: dict[str, t.Any] | None, keys: t.Sequence[str]) -> None:
    """Remove the tables along ``keys``, deepest first, that are empty now and that the original did not have."""
    for depth in range(len(keys), 0, -1):
        here = keys[:depth]
        value = _get(doc, here)
        if value == {} and (original is None or _get(original, here) is _MISSING):
            _pop(doc, here)


def _revert_default(doc: dict[str, t.Any], original: dict[str, t.Any] | None, keys: t.Sequence[str], name: str) -> None:
    """A default that names the runtime goes back to the original's (unless that named it too) or goes."""
    if _get(doc, keys) != name:
        return  # the user's own default, set after the module's: theirs to keep
    before = _MISSING if original is None else _get(original, keys)
    if before is _MISSING or before == name:
        _pop(doc, keys)
    else:
        _put(doc, keys, before)


def _original_doc(original_text: str | None, parse: t.Callable[[str | None], dict[str, t.Any]]) -> dict[str, t.Any] | None:
    """The recorded original, parsed; None when it cannot be parsed (then nothing is restored from it)."""
    try:
        return parse(original_text)
    except RuntimeConfigError:
        return None


def _finish(result: dict[str, t.Any], current: dict[str, t.Any], text: str, original: dict[str, t.Any] | None,
            recorded: bool, original_text: str | None, dump: t.Callable[[dict[str, t.Any]], str]) -> str | None:
    """The text the file must hold after the removal; None: remove the file (the module created it)."""
    if recorded and original is not None:
        if original_text is None and not result:
            return None
        if original_text is not None and result == original:
            return original_text
    if result == current:
        return text
    return dump(result)


def _load_json(text: str | None, path: str) -> dict[str, t.Any]:
    if text is None or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RuntimeConfigError("%s is not valid JSON (%s); it was not changed. Fix the file or move it away, then run again."
                                 % (path, exc)) from exc
    if not isinstance(doc, dict):
        raise RuntimeConfigError("%s must hold a JSON object, not %s; it was not changed." % (path, type(doc).__name__))
    return doc


def docker_remove(text: str | None, path: str, name: str, recorded: bool = False,
                  original_text: str | None = None) -> str | None:
    """daemon.json without the ``name`` runtime; default-runtime and features.cdi as the user had them.

    Returns the new text (``text`` itself when nothing changes) or None when the file must go (the module created it
    and nothing else was added since). A missing file stays missing (None).
    """
    if text is None:
        return None
    current = _load_json(text, path)
    original = _original_doc(original_text, lambda s: _load_json(s, path)) if recorded else None
    result = copy.deepcopy(current)
    _pop(result, ("runtimes", name))
    _revert_default(result, original, ("default-runtime",), name)
    if original is not None and isinstance(result.get("features"), dict):
        _restore(result, original, ("features", "cdi"))
        _prune(result, original, ("features",))
    if isinstance(result.get("runtimes"), dict):
        _prune(result, original, ("runtimes",))
    return _finish(result, current, text, original, recorded, original_text, lambda d: json.dumps(d, indent=4) + "\n")


def containerd_v1_remove(text: str | None, main: dict[str, t.Any], path: str, name: str, recorded: bool = False,
                         original_text: str | None = None) -> str | None:
    """A version 1 main config without the runtime: the reverse of :func:`containerd_v1`."""
    if text is None:
        return None
    original = _original_doc(original_text, lambda s: parse_toml(s, path)) if recorded else None
    cri = ("plugins", CRI_PLUGIN[1])
    result = copy.deepcopy(main)
    _pop(result, cri + ("containerd", "runtimes", name))
    _revert_default(result, original, cri + ("containerd", "default_runtime_name"), name)
    if original is not None:
        _restore(result, original, cri + ("enable_cdi",))
        if "version" not in original:
            result.pop("version", None)
    _prune(result, original, cri + ("containerd", "runtimes"))
    return _finish(result, main, text, original, recorded, original_text, dump_toml)


def containerd_main_remove(text: str | None, main: dict[str, t.Any], path: str, imports_glob: str, recorded: bool = False,
                           original_text: str | None = None, keep_import: bool = False) -> str | None:
    """The main config without ``imports_glob`` in its imports: the reverse of :func:`containerd_main`. The imports line
    goes when it is left empty and the user had none; every other line is kept as it is.

    The glob stays when ``keep_import`` says the module did not add it (the main config was never changed), and when
    the recorded original already had it (containerd 2.2's default config imports /etc/containerd/conf.d/*.toml):
    other drop-ins there are the user's."""
    if text is None:
        return None
    imports = main.get("imports", [])
    if keep_import or not isinstance(imports, list) or imports_glob not in imports:
        return text
    original = _original_doc(original_text, lambda s: parse_toml(s, path)) if recorded else None
    if original is not None and imports_glob in (original.get("imports") or []):
        return text
    kept = [i for i in imports if i != imports_glob]
    lines = text.splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if _TABLE_LINE.match(line)), len(lines))
    top, rest = "".join(lines[:end]), "".join(lines[end:])
    match = _IMPORTS.search(top)
    if match is None:  # pragma: no cover - tomllib saw a top-level imports that the pattern does not
        raise RuntimeConfigError("%s: cannot find the top-level imports line; remove %s from it by hand" % (path, imports_glob))
    if kept or (original is not None and "imports" in original):
        top = top[:match.start()] + "imports = %s" % _value(kept, "imports") + top[match.end():]
    else:
        after = match.end() + 1 if top[match.end():match.end() + 1] == "\n" else match.end()
        top = top[:match.start()] + top[after:]
    new_text = top + rest
    if recorded and original is not None:
        new_doc = parse_toml(new_text, path)
        if original_text is None and set(new_doc) <= {"version"}:
            return None
        if original_text is not None and new_doc == original:
            return original_text
    return new_text


# ------------------------------------------------------------------------------------------------ CRI-O drop-in directory
# CRI-O's compiled-in drop-in directory (pkg/config/config_unix.go CrioConfigDropInPath), the default of its
# --config-dir flag; `crio --help` prints the default of the installed binary.
CRIO_CONFIG_DIR = os.path.dirname(DEFAULT_PATHS["crio"])
_CRIO_CONFIG_DIR_HELP = re.compile(r"--config-dir\b.*?\(default:\s*\"?([^\s\")]+)\"?\)", re.DOTALL)


def crio_config_dir_from_help(text: str) -> str | None:
    """The drop-in directory that ``crio --help`` names as its --config-dir default; None when the text has none."""
    match = _CRIO_CONFIG_DIR_HELP.search(text or "")
    if match is None or not match.group(1).startswith("/"):
        return None
    return match.group(1)


# ------------------------------------------------------------------------------------------------ one engine's plan
# One planned file: its path, its option name, its text now (None: missing) and the text it must hold (None: remove it).
Planned = t.Tuple[str, str, t.Optional[str], t.Optional[str]]
# How the plan reads the host: read(path, what) gives a file's text (None: missing), check(path, what) refuses a path
# that cannot be a file. The module passes _files.read_text and _files.check_file; both raise its FileError.
Reader = t.Callable[[str, str], t.Optional[str]]
Checker = t.Callable[[str, str], t.Any]


def option_errors(params: t.Mapping[str, t.Any]) -> list[str]:
    """What is wrong with the containerd drop-in option for this engine, before anything is read."""
    if params["runtime"] != "containerd":
        return []
    dropin = params["dropin"]
    if not dropin.endswith(".toml"):
        return ["dropin: %r must end with .toml: containerd imports the drop-in directory's *.toml" % dropin]
    if any(c in os.path.dirname(dropin) for c in "*?[]"):
        return ["dropin: %r: its directory holds a glob character, so the import glob would match other files" % dropin]
    if os.path.abspath(dropin) == os.path.abspath(params["path"] or DEFAULT_PATHS["containerd"]):
        return ["dropin: %r is the main config itself; choose another file" % dropin]
    return []


def plan(params: t.Mapping[str, t.Any], path: str, record: t.Mapping[str, t.Optional[str]], read: Reader,
         check: Checker, warnings: list[str]) -> list[Planned]:
    """The files one engine's merge (state=present) or removal (state=absent) writes, in the order to write them.
    ``record`` is the originals record (per file, its text before the first change). Raises RuntimeConfigError, or
    what ``read`` and ``check`` raise."""
    if params["state"] == "present":
        return _plan_present(params, path, read, check, warnings)
    return _plan_absent(params, path, record, read)


def _plan_present(p: t.Mapping[str, t.Any], path: str, read: Reader, check: Checker, warnings: list[str]) -> list[Planned]:
    runtime = p["runtime"]
    if runtime == "docker":
        text = read(path, "path")
        return [(path, "path", text, docker_merge(text, path, p["name"], p["runtime_path"], p["default_runtime"], p["cdi"]))]
    if runtime == "containerd":
        dropin = os.path.abspath(p["dropin"])
        check(dropin, "dropin")
        text = read(path, "path")
        main = parse_toml(text, path)
        version = containerd_version(main, p["config_version"], path)
        if "cri" in (main.get("disabled_plugins") or []) or CRI_PLUGIN[version] in (main.get("disabled_plugins") or []):
            warnings.append("%s disables containerd's CRI plugin (disabled_plugins), so Kubernetes cannot use the %s "
                            "runtime until it is enabled; the runtime was added anyway." % (path, p["name"]))
        if version == 1:
            # Version 1 has no drop-ins: the runtime goes into the main config, as nvidia-ctk does.
            return [(path, "path", text, containerd_v1(text, main, p["name"], p["runtime_path"], p["default_runtime"], p["cdi"], path))]
        dropin_text = read(dropin, "dropin")
        parse_toml(dropin_text, dropin)
        glob = os.path.join(os.path.dirname(dropin), "*.toml")
        document = containerd_dropin(main, version, p["name"], p["runtime_path"], p["default_runtime"], path, p["cdi"])
        # The drop-in first: the main config imports it only once it exists.
        return [
            (dropin, "dropin", dropin_text, dump_toml(document, DROPIN_HEADER)),
            (path, "path", text, containerd_main(text, main, path, glob, version)),
        ]
    if p["cdi"] is not None:
        warnings.append("cdi has no CRI-O setting to change: CRI-O reads CDI specs from its cdi_spec_dirs "
                        "(/etc/cdi, /var/run/cdi) by default; cdi was ignored for crio.")
    text = read(path, "path")
    parse_toml(text, path)
    crio_config = os.path.abspath(p["crio_config"])
    source = parse_toml(read(crio_config, "crio_config"), crio_config)
    return [(path, "path", text, dump_toml(crio_dropin(p["name"], p["runtime_path"], p["default_runtime"], source, crio_config),
                                           DROPIN_HEADER))]


def _plan_absent(p: t.Mapping[str, t.Any], path: str, record: t.Mapping[str, t.Optional[str]], read: Reader) -> list[Planned]:
    runtime = p["runtime"]

    def original(file: str) -> tuple[bool, str | None]:
        return file in record, record.get(file)

    if runtime == "docker":
        text = read(path, "path")
        return [(path, "path", text, docker_remove(text, path, p["name"], *original(path)))]
    if runtime == "containerd":
        dropin = os.path.abspath(p["dropin"])
        dropin_text = read(dropin, "dropin")
        text = read(path, "path")
        main = parse_toml(text, path)
        planned: list[Planned] = []
        if main:
            if containerd_version(main, None, path) == 1:
                new = containerd_v1_remove(text, main, path, p["name"], *original(path))
            else:
                glob = os.path.join(os.path.dirname(dropin), "*.toml")
                # The glob is the module's to take out only when it added it: a recorded drop-in with no record of
                # the main config means the main config already imported it; without any record, containerd's
                # own drop-in directory (the 2.2 default config's import) is left alone.
                keep = path not in record and (dropin in record or glob == CONTAINERD_DEFAULT_IMPORT)
                new = containerd_main_remove(text, main, path, glob, *original(path), keep_import=keep)
            planned.append((path, "path", text, new))
        elif text is not None and path in record and record[path] is None:
            planned.append((path, "path", text, None))  # created empty by the module, still empty
        # The main config first: it stops importing the drop-in before the drop-in goes.
        return planned + [(dropin, "dropin", dropin_text, None)]
    return [(path, "path", read(path, "path"), None)]
