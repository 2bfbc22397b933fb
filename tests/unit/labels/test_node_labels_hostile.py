# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Hostile input in every field the node labels read: every label the filters return, and every line of the labels
file, stays one valid Kubernetes label; what cannot be made valid fails the filter naming the input, never written."""

from __future__ import annotations

import copy
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import nvidia_node_labels, nvidia_node_labels_file
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels

# Kubernetes' own patterns, written out here independently of _labels (apimachinery validation.go).
VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

HOSTILE = [
    "", " ", "\n", "A100\n", "A100\nnvidia.com/gpu.count=99", "x=y", "=", "a b", "a\tb", "a\rb", "\x00", "\x1b[31m",
    "ÄÖÜ", "GPU™", "日本語", "\u2028", "\ufeffA100", "a" * 63, "a" * 64, "A" * 300, "-lead", "trail-", ".dot", "dot.",
    "_u", "u_", "a/b", "../../etc/passwd", "$(reboot)", "`id`", "{{ lookup('pipe','id') }}", "#comment", "550.54.15\n",
    "1.2.3.4", "12", "12.", ".12", "12.4.1", "-1", "0x10", "NaN", "1e3", "550.54.15 ", " 550.54.15", "550.54.x",
]


def base_facts():
    return {
        "present": True, "source": "nvml", "state": "ok",
        "driver": {"version": "550.54.15", "cuda_version": "12.4"},
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:18:00.0", "compute_capability": "9.0",
                  "memory_total_mib": 81559, "mig": {"current": False, "pending": False}, "state": "ok", "source": "nvml"}],
        "pci_functions": [{"pci_bus_id": "0000:18:00.0", "class": "0x030200"}],
    }


def check_labels(labels):
    assert isinstance(labels, dict)
    for key, value in labels.items():
        assert isinstance(key, str) and isinstance(value, str)
        prefix, name = key.rpartition("/")[::2]
        assert prefix in ("nvidia.com", "gpuhost.nvidia") and SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253, key
        assert NAME.fullmatch(name) and len(name) <= 63, key
        assert VALUE.fullmatch(value) and len(value) <= 63, (key, value)
    text = nvidia_node_labels_file(labels, "# header")
    lines = text.splitlines()
    assert text.endswith("\n") and lines[0] == "# header" and len(lines) == len(labels) + 1
    assert sorted(line.split("=", 1)[0] for line in lines[1:]) == sorted(labels)


def outcome(the_facts, **kwargs):
    """The labels, checked; or the filter's error, which must name the input."""
    try:
        labels = nvidia_node_labels(the_facts, **kwargs)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("nvidia_node_labels: ")
        assert "Traceback" not in str(exc)
        return exc
    check_labels(labels)
    return labels


def with_value(path, value):
    the_facts = base_facts()
    target = the_facts
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return the_facts


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_gpu_name_is_sanitised_as_gfd_does_or_refused(value):
    result = outcome(with_value(("gpus", 0, "name"), value))
    if isinstance(result, dict):
        if value.strip():
            assert result["nvidia.com/gpu.product"] == _labels.sanitise(value)
    else:
        # What GFD's sanitise leaves can still be invalid (too long, or an end that is not alphanumeric): refused.
        assert "gpus[index 0].name" in str(result)
        assert not _labels.valid_label_value(_labels.sanitise(value))


@pytest.mark.parametrize("value", HOSTILE + [None, 550, 5.5, [], {}], ids=repr)
def test_hostile_driver_version(value):
    result = outcome(with_value(("driver", "version"), value))
    if isinstance(result, dict):
        if value is None:
            assert "nvidia.com/cuda.driver-version.full" not in result
        else:
            assert re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", value)
            assert result["nvidia.com/cuda.driver-version.full"] == value
    else:
        assert "driver.version" in str(result)


@pytest.mark.parametrize("value", HOSTILE + [None, 12.4, 12040, []], ids=repr)
def test_hostile_cuda_version(value):
    result = outcome(with_value(("driver", "cuda_version"), value))
    if isinstance(result, dict):
        if value is None:
            assert "nvidia.com/cuda.runtime-version.full" not in result
        else:
            assert re.fullmatch(r"[0-9]+\.[0-9]+", value)
    else:
        assert "driver.cuda_version" in str(result)


@pytest.mark.parametrize("value", HOSTILE + [None, 9, 9.0, [9, 0]], ids=repr)
def test_hostile_compute_capability(value):
    result = outcome(with_value(("gpus", 0, "compute_capability"), value))
    if isinstance(result, dict):
        assert value is None or re.fullmatch(r"[0-9]+\.[0-9]+", value)
    else:
        assert "compute_capability" in str(result)


@pytest.mark.parametrize("value", HOSTILE + [None, -1, True, 1.5, 10 ** 80, "81559"], ids=repr)
def test_hostile_memory(value):
    result = outcome(with_value(("gpus", 0, "memory_total_mib"), value))
    if isinstance(result, dict):
        assert value is None or (type(value) is int and value >= 0)  # pylint: disable=unidiomatic-typecheck
    else:
        assert "memory_total_mib" in str(result)


@pytest.mark.parametrize("value", HOSTILE + [None, 0x030200, True], ids=repr)
def test_hostile_pci_class_gives_a_valid_mode(value):
    """A class that is no PCI class gives mode unknown; one of the wrong type is refused by the facts' type check."""
    result = outcome(with_value(("pci_functions", 0, "class"), value))
    if isinstance(result, dict):
        assert result["nvidia.com/gpu.mode"] in ("compute", "graphics", "unknown")
    else:
        assert not isinstance(value, str) and "pci_functions[0].class" in str(result)


@pytest.mark.parametrize("value", HOSTILE + [None, True, 0], ids=repr)
def test_hostile_pci_bus_id_gives_a_valid_mode(value):
    result = outcome(with_value(("gpus", 0, "pci_bus_id"), value))
    if isinstance(result, dict):
        assert result["nvidia.com/gpu.mode"] == "unknown"
    else:
        assert not isinstance(value, str) and "gpus[0].pci_bus_id" in str(result)


@pytest.mark.parametrize("value", HOSTILE + ["ok"], ids=repr)
def test_hostile_gpu_state_leaves_gfd_labels_out(value):
    result = outcome(with_value(("gpus", 0, "state"), value))
    assert isinstance(result, dict)
    assert bool([k for k in result if k.startswith("nvidia.com/")]) is (value == "ok")


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_toolkit_version(value):
    result = outcome(base_facts(), toolkit_version=value)
    if isinstance(result, dict):
        upstream = value.split(":", 1)[-1].split("-", 1)[0] if value else None
        assert upstream != ""
        assert result.get("gpuhost.nvidia/container-toolkit.version") == upstream
    else:
        assert "toolkit_version" in str(result)


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_hostile_machine(value):
    result = outcome(base_facts(), machine=value)
    if isinstance(result, dict):
        if value.strip():
            assert result["nvidia.com/gpu.machine"] == _labels.sanitise(value.strip())
    else:
        assert "machine" in str(result)


@pytest.mark.parametrize("kwargs", [{"gfd_deployed": "yes"}, {"gfd_deployed": 1}, {"toolkit_version": 1.17},
                                    {"machine": ["DGX"]}, {"toolkit_version": {"v": 1}}])
def test_wrong_types_of_filter_arguments_fail_naming_them(kwargs):
    with pytest.raises(AnsibleFilterError, match="nvidia_node_labels: %s" % list(kwargs)[0]):
        nvidia_node_labels(base_facts(), **kwargs)


@pytest.mark.parametrize("the_facts, words", [
    ("facts", "expected a dict"), (["facts"], "expected a dict"), ({"gpus": "many"}, "gpus"), ({"gpus": ["x"]}, "gpus[0]"),
    ({"gpus": [{"index": 0, "name": 7, "state": "ok"}], "source": "nvml"}, "name"),
    ({"present": "yes"}, "present"),
])
def test_malformed_facts_fail_naming_the_field(the_facts, words):
    with pytest.raises(AnsibleFilterError) as caught:
        nvidia_node_labels(the_facts)
    assert words in str(caught.value)


def test_every_problem_is_reported_at_once():
    the_facts = base_facts()
    the_facts["driver"] = {"version": "550\n", "cuda_version": "12.4\n"}
    with pytest.raises(AnsibleFilterError) as caught:
        nvidia_node_labels(the_facts, toolkit_version="1.17.8\nx=y", machine="a" * 80)
    # (A value of the wrong type, such as a string memory, is refused earlier by the facts' type check, alone.)
    for words in ("driver.version", "driver.cuda_version", "toolkit_version", "machine"):
        assert words in str(caught.value)


def test_the_filter_does_not_change_its_input():
    the_facts = base_facts()
    before = copy.deepcopy(the_facts)
    nvidia_node_labels(the_facts, "1.17.8")
    assert the_facts == before


@pytest.mark.parametrize("labels, words", [
    ({"a.example/x": "1\nb.example/y=2"}, "not a valid Kubernetes label value"),
    ({"a.example/x\nb": "1"}, "not a valid Kubernetes label name"),
    ({"a.example/x=b": "1"}, "not a valid Kubernetes label name"),
    ({"A.example/x": "1"}, "not a valid Kubernetes label name"),  # a prefix is lower case
    ({"a.example/" + "x" * 64: "1"}, "not a valid Kubernetes label name"),
    ({"a" * 254 + "/x": "1"}, "not a valid Kubernetes label name"),
    ({"a.example/x": "v" * 64}, "not a valid Kubernetes label value"),
    ({"a.example/x": 1}, "not a valid Kubernetes label value"),
    ({"/x": "1"}, "not a valid Kubernetes label name"),
    ({"a/b/c": "1"}, "not a valid Kubernetes label name"),
    ({"": "1"}, "not a valid Kubernetes label name"),
])
def test_labels_file_refuses_what_would_change_its_lines(labels, words):
    with pytest.raises(AnsibleFilterError, match=words):
        nvidia_node_labels_file(labels)


@pytest.mark.parametrize("header", ["not a comment", "# ok\nx=y", "# ok\n\n"])
def test_labels_file_header_is_only_comments(header):
    with pytest.raises(AnsibleFilterError, match="header"):
        nvidia_node_labels_file({"a.example/x": "1"}, header)


@pytest.mark.parametrize("key, valid", [
    ("nvidia.com/gpu.product", True), ("gpuhost.nvidia/gpu.present", True), ("plain", True), ("a-b.c/d_e.f-g", True),
    ("Nvidia.com/x", False), ("nvidia..com/x", False), ("-nvidia.com/x", False), ("nvidia.com-/x", False),
    ("nvidia.com/", False), ("nvidia.com/-x", False), ("nvidia.com/x.", False), ("x" * 63, True), ("x" * 64, False),
    ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61 + "/x", True),
    ("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62 + "/x", False),
])
def test_label_key_rule(key, valid):
    assert _labels.valid_label_key(key) is valid


@pytest.mark.parametrize("value, valid", [
    ("", True), ("a", True), ("a" * 63, True), ("a" * 64, False), ("ada-lovelace", True), ("ada lovelace", False),
    ("-a", False), ("a-", False), ("a.b_c-d", True), ("ä", False), ("a\n", False), (None, False), (1, False),
])
def test_label_value_rule(value, valid):
    assert _labels.valid_label_value(value) is valid


STRUCTURAL = [
    (("gpus", 0, "mig"), "yes"), (("gpus", 0, "mig"), ["current"]), (("gpus", 0, "mig"), {"current": "yes"}),
    (("gpus", 0, "mig"), 1), (("gpus", 0, "index"), "0"), (("gpus", 0, "index"), True), (("gpus", 0, "index"), 0.5),
    (("gpus", 0, "index"), [0]), (("driver",), "550.54.15"), (("driver",), ["550.54.15"]), (("pci_functions",), "0x030200"),
    (("pci_functions",), {"0000:18:00.0": "0x030200"}), (("pci_functions", 0), "0000:18:00.0"), (("pci_functions", 0, "pci_bus_id"), 7),
    (("gpus", 0, "source"), ["nvml"]), (("source",), ["nvml"]), (("source",), None), (("gpus", 0, "state"), None),
    (("gpus", 0, "name"), ["A100"]), (("gpus", 0, "name"), None), (("present",), 1), (("gpus",), {"0": {}}), (("gpus",), "A100"),
]


@pytest.mark.parametrize("path, value", STRUCTURAL, ids=repr)
def test_malformed_structure_never_raises_anything_but_the_filter_error(path, value):
    """Each value either yields valid labels or fails the filter naming the field: never a TypeError or the like."""
    result = outcome(with_value(path, value))
    if isinstance(result, AnsibleFilterError):
        named = {"mig": "mig", "index": "index", "driver": "driver", "pci_functions": "pci_functions", "name": "name",
                 "present": "present", "gpus": "gpus"}
        assert named.get(path[-1] if isinstance(path[-1], str) else path[0], path[0]) in str(result), (path, str(result))
