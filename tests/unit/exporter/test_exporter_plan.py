# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_exporter's plan: which exporter on which family, and the DCGM package's CUDA major from the driver."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.nvidia.plugins.filter.report import gpu_exporter_plan
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _exporter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "driver"))
import test_driver_vars  # noqa: E402  pylint: disable=wrong-import-position,import-error

ROLE = Path(__file__).resolve().parents[3] / "roles" / "gpu_exporter"


def facts(cuda: str | None = None, branch: str | None = None) -> dict:
    return {"present": True, "state": "ok", "driver": {"version": None, "branch": branch, "cuda_version": cuda}, "gpus": []}


@pytest.mark.parametrize("request_, given, branch, major, source", [
    (None, facts("13.0", "580"), None, 13, "the driver's CUDA 13.0 (facts)"),
    (None, facts("12.4", "550"), "580", 12, "the driver's CUDA 12.4 (facts)"),
    (None, facts(None, "580"), None, 13, "the facts' driver branch 580 (CUDA 13.0)"),
    (None, facts(None, "535"), None, 12, "the facts' driver branch 535 (CUDA 12.2)"),
    (None, facts(), "580", 13, "nvidia_driver_branch 580 (CUDA 13.0)"),
    (None, facts(), "580.95.05", 13, "nvidia_driver_branch 580.95.05 (CUDA 13.0)"),
    (None, None, "550", 12, "nvidia_driver_branch 550 (CUDA 12.4)"),
    (12, facts("13.0"), None, 12, "gpu_exporter_dcgm_cuda_major"),
    ("13", None, None, 13, "gpu_exporter_dcgm_cuda_major"),
])
def test_the_dcgm_cuda_major_follows_the_driver(request_, given, branch, major, source):
    assert _exporter.dcgm_cuda_major(request_, given, branch) == (major, source)


@pytest.mark.parametrize("given, branch", [(None, None), (facts(), ""), (facts(None, "unknown"), "auto"), ({"driver": "x"}, None)])
def test_nothing_tells_the_cuda_major_and_the_plan_says_what_to_set(given, branch):
    major, why = _exporter.dcgm_cuda_major(None, given, branch)
    assert major is None and "gpu_exporter_dcgm_cuda_major" in why
    with pytest.raises(AnsibleFilterError, match="set gpu_exporter_dcgm_cuda_major"):
        gpu_exporter_plan("dcgm", False, "Debian", given, None, branch)


@pytest.mark.parametrize("kind, consumer, family, chosen, note", [
    ("auto", False, "Debian", "dcgm", "DCGM for CUDA 13 (datacenter-gpu-manager-4-cuda13), from the driver's CUDA 13.0 (facts)"),
    ("auto", True, "Debian", "nvidia_gpu_exporter", None),
    ("auto", False, "Archlinux", "nvidia_gpu_exporter", "nvidia_gpu_exporter instead of DCGM on Archlinux: NVIDIA publishes no DCGM"),
    ("auto", False, "RedHat", "dcgm", "DCGM for CUDA 13 (datacenter-gpu-manager-4-cuda13), from the driver's CUDA 13.0 (facts)"),
    ("auto", True, "RedHat", "nvidia_gpu_exporter", None),
    ("dcgm", False, "RedHat", "dcgm", "DCGM for CUDA 13"),
    ("nvidia_gpu_exporter", False, "Archlinux", "nvidia_gpu_exporter", None),
    ("dcgm", True, "Debian", "dcgm", "DCGM for CUDA 13"),
])
def test_the_exporter_for_each_family(kind, consumer, family, chosen, note):
    result = gpu_exporter_plan(kind, consumer, family, facts("13.0"))
    assert result["kind"] == chosen and result["errors"] == []
    assert (result["cuda_major"] == 13) is (chosen == "dcgm")
    if note is None:
        assert result["notes"] == []
    else:
        assert result["notes"][0].startswith(note), result["notes"]
    if chosen == "dcgm":
        # Without collectors there is no profiling field to serve, so no profiling module.
        assert result["proprietary"] is False
        assert result["notes"][1] == ("DCGM without the profiling module (datacenter-gpu-manager-4-proprietary-cuda13): "
                                      "no profiling field (DCGM_FI_PROF_*) in the collectors")


@pytest.mark.parametrize("family, why", [("Archlinux", "NVIDIA publishes no DCGM for Arch Linux"),
                                         ("Suse", "Debian, Ubuntu and EL 8/9/10 only .os_family Suse.")])
def test_dcgm_asked_on_a_family_without_it_is_refused(family, why):
    with pytest.raises(AnsibleFilterError, match="gpu_exporter_kind is dcgm, but .*%s.*use gpu_exporter_kind: nvidia_gpu_exporter" % why):
        gpu_exporter_plan("dcgm", False, family, facts("13.0"))


# --- DCGM's profiling module (-proprietary) -----------------------------------------------------------------------

PROF = [{"field": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "help": "x"}, {"field": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "type": "gauge", "help": "y"}]
NO_PROF = PROF[:1]


def gpus(*archs):
    """Facts with one GPU per architecture given: a name (the facts' ``architecture``), a PCI device id (``10de:...``,
    the catalog's), or None (neither known)."""
    listed = []
    for index, arch in enumerate(archs):
        gpu = {"index": index, "name": "GPU %d" % index}
        if arch and arch.startswith("10de:"):
            gpu["pci_device_id"] = arch
        elif arch:
            gpu["architecture"] = arch
        listed.append(gpu)
    return {**facts("13.0"), "gpus": listed}


@pytest.mark.parametrize("request_, collectors, given, expected, why", [
    (None, PROF, gpus("Ampere"), True, "1 profiling field(s) in the collectors and GPU 0 (GPU 0), Ampere older than Hopper"),
    (None, PROF, gpus("Ada Lovelace"), True, "GPU 0 (GPU 0), Ada Lovelace older than Hopper"),
    (None, PROF, gpus("Volta", "Volta"), True, "GPU 0 (GPU 0), Volta; GPU 1 (GPU 1), Volta older than Hopper"),
    # The catalog names the architecture from the PCI device id when the facts hold none: 2330 is an H100, 20b0 an A100.
    (None, PROF, gpus("10de:20b0"), True, "GPU 0 (GPU 0), Ampere older than Hopper"),
    (None, PROF, gpus("10de:2330"), False, "every GPU is Hopper or newer"),
    (None, PROF, gpus("Hopper", "Blackwell"), False, "every GPU is Hopper or newer, which reads the profiling fields through NVML"),
    # A mixed host needs the module for its older GPU.
    (None, PROF, gpus("Hopper", "Turing"), True, "GPU 1 (GPU 1), Turing older than Hopper"),
    (None, PROF, gpus(None), True, "no architecture known for GPU 0 (GPU 0)"),
    (None, PROF, gpus(), False, "no GPU in the facts to profile (set gpu_exporter_dcgm_proprietary: true"),
    (None, NO_PROF, gpus("Ampere"), False, "no profiling field (DCGM_FI_PROF_*) in the collectors"),
    (None, None, gpus("Ampere"), False, "no profiling field"),
    (True, NO_PROF, gpus("Hopper"), True, "gpu_exporter_dcgm_proprietary is true"),
    (False, PROF, gpus("Ampere"), False, "gpu_exporter_dcgm_proprietary is false"),
])
def test_the_profiling_module_follows_the_collectors_and_the_architectures(request_, collectors, given, expected, why):
    result = gpu_exporter_plan("dcgm", False, "Debian", given, None, None, collectors, request_)
    assert result["proprietary"] is expected
    assert why in result["notes"][1], result["notes"]
    assert result["notes"][1].startswith("DCGM %s the profiling module (datacenter-gpu-manager-4-proprietary-cuda13): "
                                         % ("with" if expected else "without"))


def test_the_default_collectors_ask_for_profiling_fields():
    """The role's default collectors carry dcgm-exporter's default profiling rows, so an Ampere host gets the module."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert _exporter.profiling_fields(defaults["gpu_exporter_dcgm_collectors"])[:2] == [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    assert defaults["gpu_exporter_dcgm_proprietary"] is None
    assert gpu_exporter_plan("auto", False, "RedHat", gpus("Ampere"), None, None, defaults["gpu_exporter_dcgm_collectors"])["proprietary"]


@pytest.mark.parametrize("args, message", [
    (("dcmg", False, "Debian"), "gpu_exporter_kind must be one of"),
    (("auto", "no", "Debian"), "consumer_only must be true or false"),
    (("auto", False, ""), "os_family must be"),
    (("auto", False, "Debian", ["x"]), "facts must be ansible_facts.nvidia_gpu"),
    (("dcgm", False, "Debian", None, "13; rm -rf /"), "gpu_exporter_dcgm_cuda_major must be a CUDA major"),
    (("dcgm", False, "Debian", None, True), "gpu_exporter_dcgm_cuda_major must be a CUDA major"),
    (("dcgm", False, "Debian", None, 0), "gpu_exporter_dcgm_cuda_major must be a CUDA major"),
    (("dcgm", False, "Debian", None, 13, None, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), "collectors must be gpu_exporter_dcgm_collectors"),
    (("dcgm", False, "Debian", None, 13, None, {"field": "x"}), "collectors must be gpu_exporter_dcgm_collectors"),
    (("dcgm", False, "Debian", None, 13, None, None, "yes"), "gpu_exporter_dcgm_proprietary must be true, false or null"),
    (("dcgm", False, "Debian", None, 13, None, None, 1), "gpu_exporter_dcgm_proprietary must be true, false or null"),
])
def test_hostile_arguments_are_refused_by_name(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        gpu_exporter_plan(*args)


# --- the CUDA repository key comes from nvidia_driver's per-distribution vars ------------------------------------

@pytest.mark.parametrize("name, fingerprint", [
    ("debian12", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    ("ubuntu2404", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    ("debian13", "02182E60104FCDC26EAE1B8597A5D4CB8793F200"),
    ("rocky9", "610C7B14E068A878070DA4E99CD0A493D42D0685"),
    ("rhel8", "610C7B14E068A878070DA4E99CD0A493D42D0685"),
    # NVIDIA's rhel10 key has no confirmed fingerprint: the check refuses until the user sets one (as nvidia_driver does).
    ("rocky10", ""),
])
def test_the_dcgm_key_is_the_drivers_for_the_distribution(name, fingerprint):
    """gpu_exporter pins no fingerprint of its own: dcgm.yml loads nvidia_driver's set_vars.yml and checks the keyring
    against the fingerprint that role pins for the host's distribution (Debian 13: 8793F200, not debian12's)."""
    assert test_driver_vars.Host(name).repo("nvidia")["key_fingerprint"] == fingerprint
    tasks = yaml.safe_load((ROLE / "tasks" / "dcgm.yml").read_text(encoding="utf-8"))
    load, keyring, check = tasks[0], tasks[1], tasks[2]
    assert load["ansible.builtin.include_role"] == {"name": "gpuhost.nvidia.nvidia_driver", "tasks_from": "set_vars.yml"}
    assert "__nvidia_driver_repo_defaults.nvidia.key_fingerprint" in check["gpuhost.nvidia.repository_key"]["fingerprint"]
    assert "__nvidia_driver_keyring" in keyring["ansible.builtin.set_fact"]["__gpu_exporter_dcgm_keyring"]
    assert check["gpuhost.nvidia.repository_key"]["dest"] == "{{ __gpu_exporter_dcgm_keyring }}"
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert defaults["gpu_exporter_dcgm_repo_key_fingerprint"] is None and defaults["gpu_exporter_dcgm_repo_keyring"] is None


def test_every_field_of_the_vocabulary_and_the_defaults_is_a_known_dcgm_field():
    """The collectors check (module_utils/_dcgm_fields.py, go-dcgm's maps) knows every field dcgm-exporter's default
    counters name, commented rows and label rows included, and every default collector."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _dcgm_fields  # pylint: disable=import-outside-toplevel
    vocab = yaml.safe_load((ROLE.parents[1] / "tests" / "repos" / "vocabulary" / "dcgm-exporter.json").read_text(encoding="utf-8"))
    published = set(vocab["metrics"]) | set(vocab["optional_metrics"]) | set(vocab["field_metrics"]) | set(vocab["label_fields"]) \
        | set(vocab["optional_label_fields"])
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))["gpu_exporter_dcgm_collectors"]
    assert published - _dcgm_fields.KNOWN == set()
    assert {row["field"] for row in defaults} <= _dcgm_fields.KNOWN
    assert len(_dcgm_fields.DCGM_FIELDS) > 600 and "DCGM_FI_DEV_GPU_TEMPERATURE" not in _dcgm_fields.KNOWN


def test_the_key_task_resolves_the_drivers_fingerprint_on_this_controller(local_play):
    """dcgm.yml's two key tasks, run in check mode on the controller (Debian 12 in CI) with the check swapped for a
    debug of its argument: nvidia_driver's set_vars.yml loads, and the fingerprint is that role's for the distribution;
    a fingerprint the user sets wins, and then nvidia_driver's vars are not loaded at all."""
    load, keyring, check = yaml.safe_load((ROLE / "tasks" / "dcgm.yml").read_text(encoding="utf-8"))[:3]
    show = {"name": "Show the fingerprint", "ansible.builtin.debug": {"msg": check["gpuhost.nvidia.repository_key"]["fingerprint"]}}
    show_keyring = {"name": "Show the keyring", "ansible.builtin.debug": {"msg": "{{ __gpu_exporter_dcgm_keyring }}"}}
    release = dict(part.split("=", 1) for part in Path("/etc/os-release").read_text(encoding="utf-8").split() if "=" in part)
    expected = test_driver_vars.Host({"12": "debian12", "13": "debian13"}.get(release.get("VERSION_ID", "").strip('"'), "debian12"))
    if release.get("ID") != "debian":
        pytest.skip("the controller is not Debian: the expected fingerprint is Debian's")
    results = local_play([{"hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
                           "vars": {"gpu_exporter_dcgm_repo_key_fingerprint": None, "gpu_exporter_dcgm_repo_keyring": None},
                           "tasks": [load, keyring, show, show_keyring]}])
    assert results["Show the fingerprint"]["msg"] == expected.repo("nvidia")["key_fingerprint"]
    assert results["Show the keyring"]["msg"] == "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg"
    results = local_play([{"hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
                           "vars": {"gpu_exporter_dcgm_repo_key_fingerprint": "AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80",
                                    "gpu_exporter_dcgm_repo_keyring": "/srv/keys/cuda.gpg"},
                           "tasks": [load, keyring, show, show_keyring]}])
    assert results["Show the fingerprint"]["msg"] == "AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80"
    assert results["Show the keyring"]["msg"] == "/srv/keys/cuda.gpg"
    assert results["Load nvidia_driver's per-distribution repository variables (the CUDA repository key)"].get("skipped")


# --- nvidia_gpu_exporter: the release archive for the machine, and the NVML backend where the release has it ------

NVGPU = {"version": "1.13.1", "backend": "exec", "architecture": "x86_64"}


@pytest.mark.parametrize("given, why", [
    ({**NVGPU, "backend": "nvml", "version": "1.3.1"}, "nvidia_gpu_exporter 1.3.1 has no NVML backend (--collect.backend=nvml came with 1.11.0)"),
    ({**NVGPU, "backend": "nvml", "version": "1.10.0"}, "has no NVML backend"),
    ({**NVGPU, "backend": "nvml", "architecture": "aarch64"}, "built for x86_64 only, not aarch64"),
    ({**NVGPU, "architecture": "ppc64le"}, "release archives for x86_64 and arm64, not ppc64le"),
    ({**NVGPU, "backend": "smi"}, "must be exec or nvml, not 'smi'"),
])
def test_a_release_that_cannot_serve_the_request_is_refused(given, why):
    with pytest.raises(AnsibleFilterError, match=re.escape(why)):
        gpu_exporter_plan("nvidia_gpu_exporter", True, "Debian", facts("13.0"), None, None, None, None, given)


@pytest.mark.parametrize("given", [NVGPU, {**NVGPU, "backend": "nvml"}, {**NVGPU, "backend": "nvml", "version": "1.11.0"},
                                   {**NVGPU, "architecture": "aarch64"}, {**NVGPU, "version": "1.3.1", "architecture": "aarch64"},
                                   {**NVGPU, "architecture": ""}])
def test_a_release_that_serves_the_request_passes(given):
    assert gpu_exporter_plan("nvidia_gpu_exporter", True, "Debian", facts("13.0"), None, None, None, None, given)["errors"] == []


def test_the_nvidia_gpu_exporter_checks_apply_only_when_it_is_chosen():
    """A host that runs DCGM is not refused for an NVML request it does not use."""
    result = gpu_exporter_plan("auto", False, "RedHat", facts("13.0"), None, None, None, None, {**NVGPU, "backend": "nvml", "version": "1.3.1"})
    assert result["kind"] == "dcgm"
