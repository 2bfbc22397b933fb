# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node labels against GFD's own test tables (NVIDIA/k8s-device-plugin v0.20.0, internal/lm/*_test.go), case by
case, and against the rules of the Go functions the tables do not cover (getArchFamily, newVersionLabeler)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels

G = _labels.GFD_PREFIX


def gpu(index=0, name="MOCKMODEL", capability="8.0", memory=300, mig=False, mig_capable=None, bus=None, **extra):
    """A GPU of the facts schema. GFD's test mock (internal/resource/testing/resource-testing.go NewDeviceMock) is
    MOCKMODEL, 300 MiB, compute capability 8.0, or 0.0 with MIG enabled; MIG-capable exactly when MIG-enabled."""
    if mig_capable is None:
        mig_capable = mig
    record = {
        "index": index, "name": name, "uuid": "GPU-%d" % index, "pci_bus_id": bus or "0000:%02x:00.0" % (index + 1),
        "compute_capability": ("0.0" if mig else capability), "memory_total_mib": memory,
        "mig": {"current": mig if mig_capable else None, "pending": mig if mig_capable else None},
        "state": "ok", "source": "nvml",
    }
    record.update(extra)
    return record


def facts(*gpus, driver="550.54.15", cuda="12.4", classes=None, source="nvml"):
    classes = classes if classes is not None else [0x030200] * len(gpus)
    return {
        "present": bool(gpus), "source": source, "state": "ok",
        "driver": {"version": driver, "cuda_version": cuda},
        "gpus": list(gpus),
        "pci_functions": [{"pci_bus_id": g["pci_bus_id"], "class": "0x%06x" % c if isinstance(c, int) else c}
                          for g, c in zip(gpus, classes)],
    }


def labels_of(the_facts, **kwargs):
    return _labels.node_labels(the_facts, **kwargs)[0]


RESOURCE_KEYS = ("gpu.product", "gpu.count", "gpu.replicas", "gpu.sharing-strategy", "gpu.memory", "gpu.family",
                 "gpu.compute.major", "gpu.compute.minor")


def resource_labels(labels):
    return {k: v for k, v in labels.items() if k[len(G):] in RESOURCE_KEYS}


# -- resource_test.go TestSanitise: every case --------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("a space separated string", "a-space-separated-string"),
    ("some(thing)else", "somethingelse"),
    ("some ( thing )else", "some-thing-else"),
    ("NVIDIA-TITAN-X-(Pascal)", "NVIDIA-TITAN-X-Pascal"),
    (" input  with multiple   spaces   ", "input-with-multiple-spaces"),
    ("some [ / thing / ]else", "some-thing-else"),
    ("some / thing /else", "some-thing-else"),
    ("some-thing.else_new", "some-thing.else_new"),
])
def test_gfd_sanitise_table(text, expected):
    assert _labels.sanitise(text) == expected


# -- resource_test.go TestGPUResourceLabeler: the cases without a sharing configuration ----------------------------------
def test_gfd_gpu_resource_labeler_zero_count_returns_empty():
    # "zero count returns empty": no GPU, none of GFD's labels; only the collection's own.
    assert labels_of(facts()) == {_labels.OWN_PREFIX + "gpu.present": "false"}


@pytest.mark.parametrize("case", ["no sharing", "time-slicing ignores non-matching resource", "mps ignores non-matching resource"])
def test_gfd_gpu_resource_labeler_without_sharing(case):
    assert resource_labels(labels_of(facts(gpu()))) == {
        G + "gpu.count": "1", G + "gpu.replicas": "1", G + "gpu.sharing-strategy": "none", G + "gpu.memory": "300",
        G + "gpu.product": "MOCKMODEL", G + "gpu.family": "ampere", G + "gpu.compute.major": "8", G + "gpu.compute.minor": "0",
    }, case


# -- mig-strategy_test.go TestMigStrategyNoneLabels ---------------------------------------------------------------------
FULL_1 = {G + "gpu.compute.major": "8", G + "gpu.compute.minor": "0", G + "gpu.family": "ampere", G + "gpu.count": "1",
          G + "gpu.replicas": "1", G + "gpu.sharing-strategy": "none", G + "gpu.memory": "300", G + "gpu.product": "MOCKMODEL"}


@pytest.mark.parametrize("description, gpus, expected", [
    ("no devices returns empty labels", [], {}),
    ("single non-mig device returns non-mig (none) labels", [gpu(0)], FULL_1),
    # The table's sharing cases change replicas, sharing-strategy and product only when the device plugin shares; a
    # MIG-enabled GPU is labelled without sharing, so these two are GFD's exact expectations.
    ("sharing is not applied to single MIG device; replicas is zero", [gpu(0, mig=True)],
     {G + "gpu.count": "1", G + "gpu.replicas": "0", G + "gpu.sharing-strategy": "none", G + "gpu.memory": "300",
      G + "gpu.product": "MOCKMODEL"}),
    ("sharing is not applied to multiple MIG device; replicas is zero", [gpu(0, mig=True), gpu(1, mig=True)],
     {G + "gpu.count": "2", G + "gpu.replicas": "0", G + "gpu.sharing-strategy": "none", G + "gpu.memory": "300",
      G + "gpu.product": "MOCKMODEL"}),
    # "sharing is applied to MIG device and non-MIG device", without the sharing: the full GPU's labeler overrides the
    # MIG-enabled one of the same model, with the count of both.
    ("MIG device and non-MIG device", [gpu(0, mig=True), gpu(1)], dict(FULL_1, **{G + "gpu.count": "2"})),
])
def test_gfd_mig_strategy_none_labels(description, gpus, expected):
    assert resource_labels(labels_of(facts(*gpus))) == expected, description


# -- nvml_test.go TestMigCapabilityLabeler ------------------------------------------------------------------------------
@pytest.mark.parametrize("description, gpus, expected", [
    ("no devices returns empty labels", [], None),
    ("single non-mig capable device returns mig.capable as false", [gpu(0)], "false"),
    ("multiple non-mig capable devices returns mig.capable as false", [gpu(0), gpu(1)], "false"),
    ("single mig capable device returns mig.capable as true", [gpu(0, mig=True)], "true"),
    ("one mig capable device among multiple returns mig.capable as true", [gpu(0), gpu(1, mig=True)], "true"),
    # IsMigCapable is about support, not the current mode (go-nvlib: GetMigMode answers, NOT_SUPPORTED is false).
    ("mig capable with MIG off", [gpu(0, mig=False, mig_capable=True)], "true"),
])
def test_gfd_mig_capability_labeler(description, gpus, expected):
    assert labels_of(facts(*gpus)).get(G + "mig.capable") == expected, description


# -- nvml_test.go TestSharingLabeler: the cases GFD's default configuration reaches ---------------------------------------
@pytest.mark.parametrize("description", ["nil config", "empty config", "config with timeslicing replicas", "config with no mps replicas"])
def test_gfd_sharing_labeler(description):
    assert labels_of(facts(gpu()))[G + "mps.capable"] == "false", description


# -- nvml_test.go TestGPUModeLabeler: every case --------------------------------------------------------------------------
@pytest.mark.parametrize("description, classes, expected", [
    ("single device with compute PCI class", [0x030000], "graphics"),
    ("single device with graphics PCI class", [0x030200], "compute"),
    ("single device with switch PCI class", [0x068000], "unknown"),
    ("multiple device have same graphics PCI class", [0x030200] * 3, "compute"),
    ("multiple device have same compute PCI class", [0x030000] * 3, "graphics"),
    ("multiple device with some with graphics and others with compute PCI class", [0x030000, 0x030200, 0x030000], "unknown"),
    # newGPUModeLabeler: a class that cannot be read makes the mode unknown.
    ("a class the facts do not hold", [0x030200, None], "unknown"),
    ("a class the facts hold as text that is not one", [0x030200, "VGA"], "unknown"),
])
def test_gfd_gpu_mode_labeler(description, classes, expected):
    gpus = [gpu(i) for i in range(len(classes))]
    the_facts = facts(*gpus, classes=[c if c is not None else 0 for c in classes])
    if None in classes:
        the_facts["pci_functions"] = the_facts["pci_functions"][:classes.index(None)]
    assert labels_of(the_facts)[G + "gpu.mode"] == expected, description
    assert _labels.gpu_mode([c if isinstance(c, int) else None for c in classes]) == expected


# -- resource.go getArchFamily (no Go table): every branch, and the ends of each --------------------------------------------
@pytest.mark.parametrize("capability, family", [
    ("1.0", "tesla"), ("1.3", "tesla"), ("2.0", "fermi"), ("2.1", "fermi"), ("3.0", "kepler"), ("3.7", "kepler"),
    ("4.0", "undefined"), ("5.0", "maxwell"), ("5.3", "maxwell"), ("6.0", "pascal"), ("6.2", "pascal"),
    ("7.0", "volta"), ("7.2", "volta"), ("7.4", "volta"), ("7.5", "turing"), ("7.9", "turing"),
    ("8.0", "ampere"), ("8.6", "ampere"), ("8.7", "ampere"), ("8.8", "ampere"), ("8.9", "ada-lovelace"),
    ("9.0", "hopper"), ("10.0", "blackwell"), ("10.3", "blackwell"), ("11.0", "undefined"), ("12.0", "blackwell"),
    ("12.1", "blackwell"), ("13.0", "rubin"), ("14.0", "undefined"), ("99.9", "undefined"),
])
def test_gfd_arch_family(capability, family):
    labels = labels_of(facts(gpu(capability=capability)))
    major, minor = capability.split(".")
    assert (labels[G + "gpu.family"], labels[G + "gpu.compute.major"], labels[G + "gpu.compute.minor"]) == (family, major, minor)


def test_gfd_arch_labels_left_out_for_compute_capability_zero():
    # newArchitectureLabels: computeMajor == 0 gives no architecture labels.
    labels = labels_of(facts(gpu(capability="0.0")))
    assert not {G + "gpu.family", G + "gpu.compute.major", G + "gpu.compute.minor"} & set(labels)


# -- nvml.go newVersionLabeler (tests/expected-output.txt gives the forms) -----------------------------------------------------
@pytest.mark.parametrize("driver, cuda, expected", [
    ("550.54.15", "12.4", ("550", "54", "15", "550.54.15", "12", "4", "12.4")),
    ("550.107.02", "12.5", ("550", "107", "02", "550.107.02", "12", "5", "12.5")),  # the README's example: 02 stays 02
    ("516.59", "11.7", ("516", "59", "", "516.59", "11", "7", "11.7")),  # X.Y: revision empty, as GFD writes it
    ("590.44.01", "13.0", ("590", "44", "01", "590.44.01", "13", "0", "13.0")),
])
def test_gfd_version_labels(driver, cuda, expected):
    labels = labels_of(facts(gpu(), driver=driver, cuda=cuda))
    names = ("cuda.driver-version.major", "cuda.driver-version.minor", "cuda.driver-version.revision", "cuda.driver-version.full",
             "cuda.runtime-version.major", "cuda.runtime-version.minor", "cuda.runtime-version.full")
    assert tuple(labels[G + n] for n in names) == expected
    # GFD's deprecated names carry the same values.
    assert (labels[G + "cuda.driver.major"], labels[G + "cuda.driver.minor"], labels[G + "cuda.driver.rev"],
            labels[G + "cuda.runtime.major"], labels[G + "cuda.runtime.minor"]) == expected[:3] + expected[4:6]


# -- tests/expected-output.txt: the label set GFD writes with MIG strategy none, less what the facts cannot give ------------
def test_gfd_expected_output_names():
    labels = labels_of(facts(gpu(name="NVIDIA H100 80GB HBM3", capability="9.0", memory=81559)), machine="DGX H100")
    expected = {
        "cuda.driver.major", "cuda.driver.minor", "cuda.driver.rev", "cuda.runtime.major", "cuda.runtime.minor",
        "cuda.driver-version.major", "cuda.driver-version.minor", "cuda.driver-version.revision", "cuda.driver-version.full",
        "cuda.runtime-version.major", "cuda.runtime-version.minor", "cuda.runtime-version.full", "gpu.machine", "gpu.count",
        "gpu.replicas", "gpu.sharing-strategy", "gpu.product", "gpu.memory", "gpu.family", "gpu.mode", "mig.capable",
        "gpu.compute.major", "gpu.compute.minor", "mps.capable",
    }  # less gfd.timestamp: GFD's run time, not the node's
    assert {k[len(G):] for k in labels if k.startswith(G)} == expected
    assert labels[G + "gpu.machine"] == "DGX-H100" and labels[G + "gpu.product"] == "NVIDIA-H100-80GB-HBM3"


# -- the examples, each a class ---------------------------------------------------------------------------------------
def test_family_is_a_valid_label_value_for_every_capability():
    for major in range(0, 20):
        for minor in range(0, 10):
            assert _labels.valid_label_value(_labels.arch_family(major, minor))


def test_parentheses_and_slashes_are_deleted_not_dashed():
    labels = labels_of(facts(gpu(name="NVIDIA TITAN X (Pascal)"), gpu(1, name="NVIDIA TITAN X (Pascal)")))
    assert labels[G + "gpu.product"] == "NVIDIA-TITAN-X-Pascal"
    assert labels_of(facts(gpu(name="Quadro K420/PCIe/SSE2")))[G + "gpu.product"] == "Quadro-K420PCIeSSE2"


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 0, 1], [1, 2, 0]])
def test_mixed_node_counts_one_model(order):
    gpus = [gpu(0, name="NVIDIA A100-SXM4-40GB", memory=40960), gpu(1, name="Tesla T4", capability="7.5", memory=15360),
            gpu(2, name="NVIDIA A100-SXM4-40GB", memory=40960)]
    labels = labels_of(facts(*[gpus[i] for i in order]))
    # The model of the GPU with the lowest index, whatever order the facts list them in; its count, memory, family.
    assert resource_labels(labels) == {
        G + "gpu.product": "NVIDIA-A100-SXM4-40GB", G + "gpu.count": "2", G + "gpu.replicas": "1", G + "gpu.sharing-strategy": "none",
        G + "gpu.memory": "40960", G + "gpu.family": "ampere", G + "gpu.compute.major": "8", G + "gpu.compute.minor": "0",
    }


def test_mixed_node_prefers_a_full_gpu_model():
    # newGPULabelers: full GPUs' labelers are applied after (over) the MIG-enabled ones.
    labels = labels_of(facts(gpu(0, name="NVIDIA A100-SXM4-40GB", mig=True), gpu(1, name="Tesla T4", capability="7.5", memory=15360)))
    assert (labels[G + "gpu.product"], labels[G + "gpu.count"], labels[G + "gpu.replicas"], labels[G + "gpu.family"]) == (
        "Tesla-T4", "1", "1", "turing")
    assert labels[G + "mig.capable"] == "true"


def test_labels_do_not_depend_on_input_order_or_mutate_it():
    the_facts = facts(gpu(0), gpu(1, name="Tesla T4", capability="7.5"))
    before = copy.deepcopy(the_facts)
    first = labels_of(the_facts)
    assert the_facts == before
    the_facts["gpus"].reverse()
    the_facts["pci_functions"].reverse()
    assert labels_of(the_facts) == first


def test_gpus_outside_nvml_are_not_counted():
    vfio = gpu(2, bus="0000:41:00.0")
    vfio.update(index=None, state="pci_only", source="pci")
    labels = labels_of(facts(gpu(0), gpu(1), vfio))
    assert labels[G + "gpu.count"] == "2"


def test_no_gfd_labels_without_nvml_or_nvidia_smi():
    labels, notes = _labels.node_labels(facts(gpu(0, source="pci"), source="pci"))
    assert labels == {_labels.OWN_PREFIX + "gpu.present": "true"}
    assert any("pci" in n for n in notes)


@pytest.mark.parametrize("state", ["gpu_lost", "no_permission", "error"])
def test_no_gfd_labels_when_a_gpu_cannot_be_read(state):
    # GFD fails and writes nothing when a device cannot be read; a partial count would draw pods to a broken node.
    labels, notes = _labels.node_labels(facts(gpu(0), gpu(1, state=state)))
    assert not [k for k in labels if k.startswith(G)]
    assert any(state in n for n in notes)


@pytest.mark.parametrize("missing", ["memory_total_mib", "compute_capability"])
def test_unknown_values_are_left_out_not_guessed(missing):
    labels, notes = _labels.node_labels(facts(gpu(0, **{missing: None})))
    if missing == "memory_total_mib":
        assert G + "gpu.memory" not in labels
    else:
        assert not {G + "gpu.family", G + "gpu.compute.major"} & set(labels) and notes
    assert labels[G + "gpu.count"] == "1"


def test_unknown_versions_are_left_out():
    labels, notes = _labels.node_labels(facts(gpu(0), driver=None, cuda=None))
    assert not [k for k in labels if k.startswith(G + "cuda.")]
    assert len(notes) == 2


def test_memory_zero_is_left_out():
    # NewGPUResourceLabeler: totalMemoryMiB == 0 gives no memory label.
    assert G + "gpu.memory" not in labels_of(facts(gpu(memory=0)))


def test_gfd_deployed_writes_none_of_gfds_labels():
    labels = labels_of(facts(gpu(0), gpu(1)), toolkit_version="1.17.8-1", gfd_deployed=True, machine="DGX")
    assert labels == {_labels.OWN_PREFIX + "gpu.present": "true", _labels.OWN_PREFIX + "container-toolkit.version": "1.17.8"}


def test_every_key_is_a_valid_kubernetes_label_name_and_gfds_or_ours():
    labels = labels_of(facts(gpu(0), gpu(1, mig=True)), toolkit_version="1:1.18.0-1", machine="PowerEdge XE9680")
    for key, value in labels.items():
        assert _labels.valid_label_key(key) and _labels.valid_label_value(value), (key, value)
        assert key.startswith((G, _labels.OWN_PREFIX))


def test_features_file_is_one_sorted_label_a_line():
    text = _labels.features_file({"b.example/x": "1", "a.example/y": ""}, "# one\n# two")
    assert text == "# one\n# two\na.example/y=\nb.example/x=1\n"


# -- newGPULabelers over many random nodes: the labels are one of the answers GFD can give ------------------------------------
def _gfd_possible_resource_labels(gpus):
    """internal/lm/mig-strategy.go newGPULabelers, transliterated: counts per name over every device; one labeler per
    name for the MIG-enabled devices (the last device of the name), then one per name for the full ones; the labelers
    merged in order, later keys overwriting earlier ones. Go's map order is random, so every order of each group is an
    answer GFD can give. The mock's rules stand for NVML: memory 0 gives no memory label, compute major 0 no
    architecture labels (resource.go NewGPUResourceLabeler, newArchitectureLabels)."""
    import itertools  # pylint: disable=import-outside-toplevel

    counts, mig_enabled, full = {}, {}, {}
    for device in gpus:
        counts[device["name"]] = counts.get(device["name"], 0) + 1
        (mig_enabled if device["mig"]["current"] is True else full)[device["name"]] = device

    def labeler(device, sharing):
        out = {"gpu.product": _labels.sanitise(device["name"]), "gpu.count": str(counts[device["name"]]),
               "gpu.replicas": "1" if sharing else "0", "gpu.sharing-strategy": "none"}
        if device["memory_total_mib"]:
            out["gpu.memory"] = str(device["memory_total_mib"])
        major, minor = (int(p) for p in device["compute_capability"].split("."))
        if major:
            out.update({"gpu.family": _labels.arch_family(major, minor), "gpu.compute.major": str(major), "gpu.compute.minor": str(minor)})
        return out

    answers = []
    for mig_order in itertools.permutations(mig_enabled):
        for full_order in itertools.permutations(full):
            merged = {}
            for name in mig_order:
                merged.update(labeler(mig_enabled[name], False))
            for name in full_order:
                merged.update(labeler(full[name], True))
            answers.append({G + k: v for k, v in merged.items()})
    return answers


MODELS = [("NVIDIA A100-SXM4-80GB", "8.0", 81920), ("NVIDIA H100 80GB HBM3", "9.0", 81559), ("Tesla T4", "7.5", 15360),
          ("NVIDIA GeForce RTX 4090", "8.9", 24564), ("NVIDIA TITAN X (Pascal)", "6.1", 12288), ("Tesla K80", "3.7", 11441),
          ("NVIDIA B200", "10.0", 183359), ("NVIDIA A100-SXM4-40GB", "8.0", 0), ("MOCKMODEL", "0.0", 300)]


@pytest.mark.parametrize("seed", range(200))
def test_gfd_resource_labels_over_random_nodes(seed):
    import random  # pylint: disable=import-outside-toplevel

    rng = random.Random(seed)
    kinds = rng.sample(MODELS, rng.randint(1, 3))
    gpus = []
    for index in range(rng.randint(1, 8)):
        name, capability, memory = rng.choice(kinds)
        mig_capable = rng.random() < 0.5
        gpus.append(gpu(index, name=name, capability=capability, memory=memory + rng.choice([0, 0, 2]) if memory else 0,
                        mig=mig_capable and rng.random() < 0.5, mig_capable=mig_capable))
        if gpus[-1]["mig"]["current"]:
            gpus[-1]["compute_capability"] = capability  # real MIG-enabled GPUs report their capability
    shuffled = gpus[:]
    rng.shuffle(shuffled)
    labels = _labels.node_labels(facts(*shuffled))[0]
    assert resource_labels(labels) in _gfd_possible_resource_labels(gpus)
    # Stable: the same node gives the same labels whatever order the facts list the GPUs in.
    assert labels_of(facts(*gpus)) == labels
