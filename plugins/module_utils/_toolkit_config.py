# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planner: the keys we own in the NVIDIA Container Toolkit's config.toml, merged line by line.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The file belongs to the toolkit's package (its defaults, mostly commented out) and to the user. We change only the
lines of the keys asked for: a key already set gets its value replaced on its own line, a key only present as a
comment (``#no-cgroups = false``) gets the real line right after that comment, and a key that is nowhere goes to the
top of its table (a missing table is appended). Every other byte stays. The result is parsed again and must equal the
original document with exactly the asked values changed; anything else is refused before a write.

Key names and values are the toolkit's (NVIDIA/nvidia-container-toolkit api/config/v1: config.go, cli.go,
runtime.go, features.go; internal/modifier/factory.go for the modes), cited in docs/sources.md.
"""

from __future__ import annotations

import copy
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _runtime, _toolkit

DEFAULT_PATH = "/etc/nvidia-container-runtime/config.toml"
# nvidia-container-runtime.mode: the modes the runtime's modifier factory accepts, and auto (resolved per platform;
# jit-cdi on NVML platforms since 1.18). jit-cdi arrived in 1.18.0.
MODES = ("auto", "legacy", "cdi", "csv", "jit-cdi")
# The features table's flags (api/config/v1/features.go); each is a boolean.
FEATURES = (
    "allow-cuda-compat-libs-from-container",
    "allow-ldconfig-from-container",
    "allow-unknown-oci-spec-fields",
    "disable-cuda-compat-lib-hook",
    "disable-imex-channel-creation",
    "ignore-imex-channel-requests",
    "no-additional-gids-for-device-nodes",
)
# Option name -> (table, key) in the file. Table "" is the top level.
KEYS: dict[str, tuple[str, str]] = {
    "mode": ("nvidia-container-runtime", "mode"),
    "accept_envvar_when_unprivileged": ("", "accept-nvidia-visible-devices-envvar-when-unprivileged"),
    "accept_volume_mounts": ("", "accept-nvidia-visible-devices-as-volume-mounts"),
    "no_cgroups": ("nvidia-container-cli", "no-cgroups"),
}
HEADER = "# gpuhost.nvidia manages the keys it sets here (nvidia_container_toolkit_config); the rest is yours.\n"


# The first release whose config has the switch that turns off the enable-cuda-compat hook (commit aff9301f, v1.17.5).
COMPAT_HOOK_SWITCH_SINCE = "1.17.5"


def mitigations(toolkit_version: str | None) -> dict[str, bool]:
    """The feature flags that mitigate what ``toolkit_version`` still lacks: disable-cuda-compat-lib-hook for a release
    from 1.17.5 without the CVE-2025-23266 fix (1.17.8). {} for a fixed, unknown or older release (before 1.17.5 the
    hook ran only in CDI mode and the switch does not exist)."""
    if not toolkit_version or not _toolkit.version_tuple(toolkit_version):
        return {}
    if "CVE-2025-23266" in _toolkit.open_cves(toolkit_version) and \
            _toolkit.version_tuple(toolkit_version) >= _toolkit.version_tuple(COMPAT_HOOK_SWITCH_SINCE):
        return {"disable-cuda-compat-lib-hook": True}
    return {}


class ToolkitConfigError(Exception):
    """A request or an existing file the planner cannot use; the message names the value or the file and the fix."""


def request_errors(settings: t.Mapping[str, t.Any]) -> list[str]:
    """Every problem with the asked settings: unknown options, a mode or flag that does not exist, a non-boolean."""
    errors: list[str] = []
    known = set(KEYS) | {"features"}
    for name in sorted(set(settings) - known):
        errors.append("%s is not a toolkit setting this module manages; choose from %s" % (name, ", ".join(sorted(known))))
    mode = settings.get("mode")
    if mode is not None and mode not in MODES:
        errors.append("mode %r: choose %s (nvidia-container-runtime.mode)" % (mode, ", ".join(MODES)))
    for name in ("accept_envvar_when_unprivileged", "accept_volume_mounts", "no_cgroups"):
        value = settings.get(name)
        if value is not None and not isinstance(value, bool):
            errors.append("%s must be true or false, not %r" % (name, value))
    features = settings.get("features")
    if features is not None:
        if not isinstance(features, dict):
            errors.append("features must be a mapping of feature flag to true/false, not %r" % (features,))
        else:
            for flag, value in features.items():
                if flag not in FEATURES:
                    errors.append("features: %r is not a toolkit feature flag; choose from %s" % (flag, ", ".join(FEATURES)))
                elif not isinstance(value, bool):
                    errors.append("features.%s must be true or false, not %r" % (flag, value))
    return errors


def role_settings_errors(settings: t.Any) -> list[str]:
    """The role's nvidia_container_toolkit_settings (the module's option names: runtime_mode for mode) checked as the
    module checks them, each error naming the variable."""
    if settings in (None, ""):
        return []
    if not isinstance(settings, dict):
        return ["nvidia_container_toolkit_settings must be a mapping, not %r" % (settings,)]
    names = ["runtime_mode"] + [k for k in KEYS if k != "mode"] + ["features"]
    errors = ["nvidia_container_toolkit_settings: %s is not a toolkit setting; choose from %s" % (k, ", ".join(names))
              for k in sorted(set(settings) - set(names))]
    known = {("mode" if k == "runtime_mode" else k): v for k, v in settings.items() if k in names}
    for error in request_errors(known):
        errors.append("nvidia_container_toolkit_settings: " + ("runtime_" + error if error.startswith("mode ") else error))
    return errors


def wanted(settings: t.Mapping[str, t.Any]) -> dict[tuple[str, str], t.Any]:
    """{(table, key): value} for every setting asked (None means: leave the key alone)."""
    out: dict[tuple[str, str], t.Any] = {}
    for name, where in KEYS.items():
        if settings.get(name) is not None:
            out[where] = settings[name]
    for flag, value in sorted((settings.get("features") or {}).items()):
        out[("features", flag)] = value
    return out


def _get(doc: dict[str, t.Any], where: tuple[str, str]) -> t.Any:
    table, key = where
    holder = doc.get(table) if table else doc
    if table and holder is not None and not isinstance(holder, dict):
        raise ToolkitConfigError("[%s] must be a table, not %r" % (table, holder))
    return (holder or {}).get(key, _MISSING)


_MISSING = object()
_HEADER_RE = re.compile(r"^\s*\[\s*([^\]\[]+?)\s*\]\s*(#.*)?$")


def _sections(lines: list[str]) -> list[tuple[str, int, int]]:
    """(table name, first line, end line) for the top level ("") and each ``[table]``; array tables keep their text."""
    out: list[tuple[str, int, int]] = []
    name, start = "", 0
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[["):
            out.append((name, start, index))
            name, start = "[[array]]", index
            continue
        match = _HEADER_RE.match(line)
        if match:
            out.append((name, start, index))
            name, start = match.group(1).strip().strip('"'), index
    out.append((name, start, len(lines)))
    return out


def _key_re(key: str, commented: bool) -> re.Pattern[str]:
    quoted = '(?:%s|"%s")' % (re.escape(key), re.escape(key))
    return re.compile(r"^(\s*)%s%s\s*=" % ("#\\s*" if commented else "", quoted))


def _line(key: str, value: t.Any, indent: str = "") -> str:
    return "%s%s = %s\n" % (indent, _runtime._key(key), _runtime._value(value, key))  # pylint: disable=protected-access


def set_keys(text: str, values: dict[tuple[str, str], t.Any], remove: t.Iterable[tuple[str, str]] = ()) -> str:
    """``text`` with each (table, key) of ``values`` set and each of ``remove`` deleted, line by line."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    edits: list[tuple[str, str, t.Any]] = [(tb, k, v) for (tb, k), v in values.items()] + [(tb, k, _MISSING) for tb, k in remove]
    for table, key, value in edits:
        sections = [s for s in _sections(lines) if s[0] == table]
        done = False
        for _name, start, end in sections:
            for index in range(start, end):
                match = _key_re(key, False).match(lines[index])
                if match:
                    if value is _MISSING:
                        del lines[index]
                    else:
                        lines[index] = _line(key, value, match.group(1))
                    done = True
                    break
            if done:
                break
        if done or value is _MISSING:
            continue
        if sections:
            _name, start, end = sections[0]
            content = [i for i in range(start + (1 if table else 0), end) if lines[i].strip()]
            at = content[-1] + 1 if content else start + (1 if table else 0)
            for index in range(start, end):
                if _key_re(key, True).match(lines[index]):
                    at = index + 1
                    break
            lines.insert(at, _line(key, value))
        elif table:
            if lines and lines[-1].strip():
                lines.append("\n")
            lines += ["[%s]\n" % _runtime._key(table), _line(key, value)]  # pylint: disable=protected-access
        else:
            lines.insert(0, _line(key, value))
    return "".join(lines)


def _without(doc: dict[str, t.Any], keys: t.Iterable[tuple[str, str]]) -> dict[str, t.Any]:
    out = copy.deepcopy(doc)
    for table, key in keys:
        holder = out.get(table) if table else out
        if isinstance(holder, dict):
            holder.pop(key, None)
            if table and holder == {}:
                out.pop(table, None)
    return out


def merge(text: str | None, settings: t.Mapping[str, t.Any], path: str = DEFAULT_PATH) -> str | None:
    """The file's new text with the asked settings; ``text`` itself (None: still no file) when it already says them."""
    errors = request_errors(settings)
    if errors:
        raise ToolkitConfigError("; ".join(errors))
    values = wanted(settings)
    source = text if text is not None else ""
    doc = _runtime.parse_toml(source, path)
    try:
        changes = {where: value for where, value in values.items() if _get(doc, where) != value or
                   type(_get(doc, where)) is not type(value)}
    except ToolkitConfigError as exc:
        raise ToolkitConfigError("%s: %s; it was not changed. Fix the file, then run again." % (path, exc)) from exc
    if not changes:
        return text
    new_text = set_keys(source if source.strip() else HEADER, changes)
    check_result(doc, new_text, values, path)
    return new_text


def check_result(before: dict[str, t.Any], new_text: str, values: dict[tuple[str, str], t.Any], path: str,
                 removed: t.Iterable[tuple[str, str]] = ()) -> None:
    """The new text must parse, hold each asked value, lack each removed key and keep everything else as it was."""
    try:
        after = _runtime.parse_toml(new_text, path)
    except _runtime.RuntimeConfigError as exc:
        raise ToolkitConfigError("%s: setting %s by editing the file's lines would make it invalid TOML (%s); it was not "
                                 "changed. Set them by hand." % (path, ", ".join(w[1] for w in list(values) + list(removed)), exc)) from exc
    touched = list(values) + list(removed)
    for where, value in values.items():
        if _get(after, where) != value:
            raise ToolkitConfigError("%s: cannot set %s.%s by editing the file's lines (is the key written in an unusual "
                                     "form?); it was not changed. Set it by hand." % (path, where[0] or "(top level)", where[1]))
    for where in removed:
        if _get(after, where) is not _MISSING:
            raise ToolkitConfigError("%s: cannot remove %s.%s by editing the file's lines; it was not changed."
                                     % (path, where[0] or "(top level)", where[1]))
    if _without(after, touched) != _without(before, touched):
        raise ToolkitConfigError("%s: editing the lines of %s would change other keys; it was not changed. Set them by hand."
                                 % (path, ", ".join("%s.%s" % w if w[0] else w[1] for w in touched)))


def restore(text: str | None, original_text: str | None, managed: t.Iterable[tuple[str, str]],
            path: str = DEFAULT_PATH) -> str | None:
    """The text after state=absent: each managed key back to the original's value, or gone when the original had none.
    The original's exact bytes when the result parses to it; None (remove the file) when there was no file and nothing
    else is left. ``text`` itself when nothing changes."""
    if text is None:
        return None
    managed = [tuple(m) for m in managed]
    original = _runtime.parse_toml(original_text, path) if original_text is not None else {}
    current = _runtime.parse_toml(text, path)
    put = {where: _get(original, where) for where in managed if _get(original, where) is not _MISSING}
    put = {where: value for where, value in put.items() if _get(current, where) != value}
    drop = [where for where in managed if _get(original, where) is _MISSING and _get(current, where) is not _MISSING]
    new_text = set_keys(text, put, drop) if (put or drop) else text
    if put or drop:
        check_result(current, new_text, put, path, drop)
        new_text = drop_empty_tables(new_text, {w[0] for w in drop if w[0]} - set(original))
    result = _runtime.parse_toml(new_text, path)
    if original_text is not None and result == original:
        return original_text
    if original_text is None and not result:
        return None
    return new_text


def drop_empty_tables(text: str, tables: t.Iterable[str]) -> str:
    """``text`` without the ``[table]`` header (and the blank line before it) of each of ``tables`` left empty: only
    tables the module created, so that removing its keys does not leave their headers behind."""
    lines = text.splitlines(keepends=True)
    for table in tables:
        for name, start, end in _sections(lines):
            if name == table and all(not lines[i].strip() for i in range(start + 1, end)):
                first = start - 1 if start > 0 and not lines[start - 1].strip() else start
                del lines[first:end]
                break
    out = "".join(lines)
    if out.startswith(HEADER) and not _runtime.parse_toml(out, "the file"):
        return ""
    return out


def owned_keys(settings: t.Mapping[str, t.Any]) -> list[list[str]]:
    """The (table, key) pairs a request manages, as JSON-friendly lists for the module's record."""
    return [list(where) for where in wanted(settings)]
