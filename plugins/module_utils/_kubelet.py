# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planners for what a kubelet registers with: node labels and taints, in its environment file or its drop-in
configuration directory.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

- Label keys and values follow Kubernetes' own rules (apimachinery's ``IsQualifiedName`` and ``IsValidLabelValue``,
  implemented once in _labels).
- A kubelet may set only some labels on its own Node: the NodeRestriction admission plugin refuses the
  ``node-restriction.kubernetes.io`` namespace and every ``kubernetes.io``/``k8s.io`` label that is not a kubelet
  label (k8s.io/kubelet ``pkg/apis/well_known_labels.go``, ``IsKubeletLabel``), and the kubelet itself refuses to
  start with such a ``--node-labels`` entry. They are refused here, before anything is written.
- The environment file (``/etc/default/kubelet`` on Debian and Ubuntu, ``/etc/sysconfig/kubelet`` on RHEL) is a
  systemd ``EnvironmentFile``; kubeadm's drop-in passes ``$KUBELET_EXTRA_ARGS`` unbraced, so systemd splits the value
  into words at whitespace. Only a value this module can read with certainty is merged; anything else is refused,
  and the file is left as it is.
- A ``--config-dir`` drop-in replaces lists whole (Kubernetes' "Kubelet Configuration Directory Merging"), so the
  drop-in's ``registerWithTaints`` carries the taints already configured before it, plus ours.
"""

from __future__ import annotations

import json
import re
import shlex
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# k8s.io/kubelet pkg/apis/well_known_labels.go: the labels and label namespaces a kubelet may set on itself.
KUBELET_LABELS = frozenset((
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type", "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
))
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"

LABELS_FLAG = "--node-labels"
TAINTS_FLAG = "--register-with-taints"
# What one word of the environment variable may hold: printable ASCII without quotes, backslashes or `$`, so that
# systemd's EnvironmentFile reading and its word splitting both leave it as it is.
_WORD_RE = re.compile(r"[!#%&()*+,\-./0-9:;<=>?@A-Z\[\]^_a-z{|}~]+")
_VARIABLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class KubeletError(ValueError):
    """A request or a file this planner refuses; the message names the value and the fix."""


def _show(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def qualified_name_error(key: t.Any, what: str = "label key") -> str | None:
    """Why ``key`` is not a Kubernetes qualified name (``[prefix/]name``), or None (the rule is _labels')."""
    if not isinstance(key, str):
        return "%s %s is a %s, not a string" % (what, _show(key), type(key).__name__)
    if _labels.valid_label_key(key):
        return None
    return ("%s %s is not a qualified name: an optional DNS subdomain prefix (lower-case letters, digits, '-' and '.', "
            "at most 253) and '/', then 1-63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
            % (what, _show(key)))


def label_value_error(value: t.Any, what: str = "label value") -> str | None:
    """Why ``value`` is not a Kubernetes label value, or None (the rule is _labels')."""
    if not isinstance(value, str):
        return "%s %s is a %s, not a string" % (what, _show(value), type(value).__name__)
    if _labels.valid_label_value(value):
        return None
    return ("%s %s: at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter "
            "or digit" % (what, _show(value)))


def kubelet_label_error(key: str) -> str | None:
    """Why a kubelet may not set ``key`` on its own Node, or None (``IsKubeletLabel`` and NodeRestriction)."""
    namespace = key.split("/", 1)[0] if "/" in key else ""
    if namespace == NODE_RESTRICTION_NAMESPACE or namespace.endswith("." + NODE_RESTRICTION_NAMESPACE):
        return ("label %s: the NodeRestriction admission plugin forbids a kubelet to set %s labels on itself; set it "
                "from the cluster side (playbooks/k8s_cluster.yml or kubectl label)" % (_show(key), NODE_RESTRICTION_NAMESPACE))
    kubernetes = any(namespace == d or namespace.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    allowed = key in KUBELET_LABELS or any(namespace == d or namespace.endswith("." + d) for d in KUBELET_LABEL_NAMESPACES)
    if kubernetes and not allowed:
        return ("label %s: a kubelet may set only its own kubernetes.io/k8s.io labels (kubelet.kubernetes.io/*, "
                "node.kubernetes.io/*, kubernetes.io/hostname, topology.kubernetes.io/zone, ...); the kubelet refuses "
                "to start with it. Use a prefix of your own, or set it from the cluster side" % _show(key))
    return None


def check_labels(labels: t.Any) -> list[str]:
    """Every problem of a labels mapping, for registration by the kubelet."""
    if not isinstance(labels, dict):
        return ["labels must be a mapping of label keys to values, not %s" % _show(labels)]
    errors = []
    for key, value in labels.items():
        problem = qualified_name_error(key) or label_value_error(value, "the value of label %s" % _show(key))
        problem = problem or kubelet_label_error(key)
        if problem:
            errors.append(problem)
    return errors


def check_taints(taints: t.Any) -> list[str]:
    """Every problem of a taints list (dicts of key, value (optional) and effect)."""
    if not isinstance(taints, list):
        return ["taints must be a list of {key, value, effect}, not %s" % _show(taints)]
    errors = []
    seen: set[tuple[str, str]] = set()
    for number, taint in enumerate(taints, 1):
        where = "taint %d" % number
        if not isinstance(taint, dict):
            errors.append("%s must be a mapping of key, value and effect, not %s" % (where, _show(taint)))
            continue
        unknown = sorted(str(k) for k in taint if k not in ("key", "value", "effect"))
        if unknown:
            errors.append("%s has unknown fields %s; a taint has key, value and effect" % (where, ", ".join(unknown)))
        problem = qualified_name_error(taint.get("key"), "%s key" % where)
        value = taint.get("value")
        problem = problem or (label_value_error(value, "%s value" % where) if value is not None else None)
        effect = taint.get("effect")
        if not problem and effect not in TAINT_EFFECTS:
            problem = "%s effect %s must be one of %s" % (where, _show(effect), ", ".join(TAINT_EFFECTS))
        if problem:
            errors.append(problem)
            continue
        if (taint["key"], effect) in seen:
            errors.append("%s repeats key %s with effect %s" % (where, _show(taint["key"]), effect))
        seen.add((taint["key"], effect))
    return errors


def taint_text(taint: t.Mapping[str, t.Any]) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), the kubelet's --register-with-taints form."""
    value = taint.get("value")
    return "%s%s:%s" % (taint["key"], "=%s" % value if value else "", taint["effect"])


def parse_taint_text(text: str, where: str) -> dict[str, str]:
    """The reverse of :func:`taint_text`; KubeletError naming ``where`` for text that is not a taint."""
    body, sep, effect = text.rpartition(":")
    key, has_value, value = body.partition("=")
    taint = {"key": key, "effect": effect}
    if has_value:
        taint["value"] = value
    if not sep or check_taints([taint]):
        raise KubeletError("%s: %s is not a taint (key=value:Effect); fix it by hand, then run again" % (where, _show(text)))
    return taint


# ----------------------------------------------------------------------------------------------- environment file
class EnvFile(t.NamedTuple):
    lines: list[str]
    index: int | None  # the line that sets the variable, None when there is none
    words: list[str]  # the variable's value, split as systemd splits an unbraced $VARIABLE


def parse_env_file(text: str | None, variable: str, path: str) -> EnvFile:
    """Read ``variable`` from a systemd EnvironmentFile; KubeletError for anything not read with certainty."""
    if not _VARIABLE_RE.fullmatch(variable):
        raise KubeletError("variable %s must be a shell variable name such as KUBELET_EXTRA_ARGS" % _show(variable))
    lines = (text or "").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    index = None
    words: list[str] = []
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        name, sep, value = stripped.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name[len("export "):].strip()
        if name != variable:
            if variable in line and not sep:
                raise KubeletError("%s line %d: %s is not an assignment systemd reads; fix it by hand, then run again"
                                   % (path, number + 1, _show(line)))
            continue
        if index is not None:
            raise KubeletError("%s sets %s twice (lines %d and %d); keep one, then run again" % (path, variable, index + 1, number + 1))
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if line.rstrip().endswith("\\") or any(c in value for c in "\"'\\$"):
            raise KubeletError("%s line %d: the value of %s holds quotes, backslashes, '$' or a continued line, which "
                               "this module does not rewrite; simplify it by hand, then run again" % (path, number + 1, variable))
        words = value.split()
        bad = [w for w in words if not _WORD_RE.fullmatch(w)]
        if bad:
            raise KubeletError("%s line %d: %s holds %s; fix it by hand, then run again" % (path, number + 1, variable, _show(bad[0])))
        index = number
    return EnvFile(lines, index, words)


def _flag_values(words: list[str], flag: str, path: str) -> tuple[int | None, str | None]:
    """Where ``flag`` is (``--flag=value``) and its value; KubeletError for ``--flag value`` or a repeated flag."""
    found: tuple[int | None, str | None] = (None, None)
    for number, word in enumerate(words):
        if word == flag:
            raise KubeletError("%s: write %s=VALUE as one word (the module merges only that form)" % (path, flag))
        if word.startswith(flag + "="):
            if found[0] is not None:
                raise KubeletError("%s gives %s twice; keep one, then run again" % (path, flag))
            found = (number, word[len(flag) + 1:])
    return found


def read_registration(words: list[str], path: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The labels and taints a kubelet's arguments register."""
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []
    value = _flag_values(words, LABELS_FLAG, path)[1]
    for item in (value or "").split(","):
        if item:
            key, sep, label = item.partition("=")
            if not sep or qualified_name_error(key) or label_value_error(label):
                raise KubeletError("%s: %s in %s is not key=value; fix it by hand, then run again" % (path, _show(item), LABELS_FLAG))
            labels[key] = label
    value = _flag_values(words, TAINTS_FLAG, path)[1]
    for item in (value or "").split(","):
        if item:
            taints.append(parse_taint_text(item, "%s %s" % (path, TAINTS_FLAG)))
    return labels, taints


def _set_flag(words: list[str], flag: str, value: str | None, path: str) -> list[str]:
    index = _flag_values(words, flag, path)[0]
    words = list(words)
    if index is not None:
        if value:
            words[index] = "%s=%s" % (flag, value)
        else:
            del words[index]
    elif value:
        words.append("%s=%s" % (flag, value))
    return words


def _taint_id(taint: t.Mapping[str, t.Any]) -> tuple[str, str]:
    return taint["key"], taint["effect"]


def merge_registration(current: tuple[dict[str, str], list[dict[str, str]]], labels: t.Mapping[str, str],
                       taints: list[dict[str, t.Any]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Ours added to what is there: a label of ours replaces the same key, a taint replaces the same key and effect."""
    new_labels = dict(current[0])
    new_labels.update(labels)
    ours = {_taint_id(x): x for x in taints}
    new_taints = [x for x in current[1] if _taint_id(x) not in ours] + [
        {k: v for k, v in x.items() if k in ("key", "value", "effect") and v is not None} for x in taints]
    return new_labels, new_taints


def remove_registration(current: tuple[dict[str, str], list[dict[str, str]]],
                        original: tuple[dict[str, str], list[dict[str, str]]] | None,
                        labels: t.Iterable[str], taints: t.Iterable[t.Mapping[str, t.Any]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Ours taken out again: a key the original had gets its original value back, any other goes."""
    orig_labels, orig_taints = original or ({}, [])
    new_labels = dict(current[0])
    for key in labels:
        if key in orig_labels:
            new_labels[key] = orig_labels[key]
        else:
            new_labels.pop(key, None)
    ids = {_taint_id(x) for x in taints}
    originals = {_taint_id(x): x for x in orig_taints}
    new_taints = []
    for taint in current[1]:
        tid = _taint_id(taint)
        if tid not in ids:
            new_taints.append(taint)
        elif tid in originals:
            new_taints.append(originals[tid])
    return new_labels, new_taints


def render_words(words: list[str], registration: tuple[dict[str, str], list[dict[str, str]]], path: str) -> list[str]:
    labels, taints = registration
    words = _set_flag(words, LABELS_FLAG, ",".join("%s=%s" % kv for kv in labels.items()), path)
    return _set_flag(words, TAINTS_FLAG, ",".join(taint_text(x) for x in taints), path)


def render_env_file(env: EnvFile, variable: str, words: list[str]) -> str | None:
    """The file with the variable set to ``words``; None when that leaves the file empty."""
    lines = list(env.lines)
    line = '%s="%s"' % (variable, " ".join(words))
    if env.index is None:
        lines.append(line)
    else:
        lines[env.index] = line
    if not words and env.index is not None and all(not x.strip() for i, x in enumerate(lines) if i != env.index):
        return None
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- --config-dir drop-in
def dropin_document(taints: list[dict[str, t.Any]], earlier: list[dict[str, t.Any]]) -> dict[str, t.Any]:
    """The KubeletConfiguration drop-in: the taints configured before it (a list replaces whole), then ours."""
    merged = merge_registration(({}, earlier), {}, taints)[1]
    return {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "registerWithTaints": merged}


def dropin_text(document: t.Mapping[str, t.Any]) -> str:
    """JSON, which the kubelet's configuration loader reads as it reads YAML, with a header-free stable layout."""
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


def config_taints(document: t.Any, where: str) -> list[dict[str, t.Any]]:
    """``registerWithTaints`` of a KubeletConfiguration document (empty when absent); KubeletError when malformed."""
    if document is None:
        return []
    if not isinstance(document, dict):
        raise KubeletError("%s is not a KubeletConfiguration mapping" % where)
    taints = document.get("registerWithTaints")
    if taints is None:
        return []
    errors = check_taints(taints)
    if errors:
        raise KubeletError("%s: registerWithTaints: %s" % (where, "; ".join(errors)))
    return [dict(x) for x in taints]


def quote_words(words: list[str]) -> str:
    """The words as a shell would show them, for messages."""
    return " ".join(shlex.quote(w) for w in words)
