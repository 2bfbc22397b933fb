# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU facts in the observation's call (issue 21): gpuhost_converged state=observe with gpu_facts returns
ansible_facts.nvidia_gpu exactly as nvidia_gpu_facts does (same collector, same root option, same backends and gather
groups), refuses a bad root before it reads anything, and the action plugin passes the facts through beside the
observation's own fact. playbooks/site.yml's facts play makes one call for both (tests/unit/playbooks)."""

from __future__ import annotations

import os

import converged_harness
import pytest

import fake_pynvml
import hostile
import sysfs
from gpufacts_support import OWN_XML

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _converged_host, _facts, _pci
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_converged, nvidia_gpu_facts

PROFILES = sorted(name[:-5] for name in os.listdir(os.path.dirname(fake_pynvml.__file__) + "/profiles") if name.endswith(".yaml"))


@pytest.fixture(autouse=True)
def fixed_kernel_release(monkeypatch):
    """The synthetic trees build modules for sysfs.KERNEL_RELEASE, not for the kernel running the tests."""
    real = _pci.installed_module_type
    monkeypatch.setattr(_pci, "installed_module_type", lambda root="/", kernel_release=None: real(root, sysfs.KERNEL_RELEASE))


@pytest.fixture
def both(run_module, tmp_path):
    """``both(root, install)``: the facts from nvidia_gpu_facts and from the observation, each run after ``install()``
    (a fresh fake NVML, or none) on the same root; the observation reads an empty records directory."""
    def run(root, install=lambda: None, smi=None, check_mode=False):
        install()
        plain = run_module(nvidia_gpu_facts, {"root": root}, smi=smi, check_mode=check_mode)
        install()
        observed = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "converged"), "gpu_facts": True,
                                                  "gpu_facts_root": root}, smi=smi, check_mode=check_mode)
        for result in (plain, observed):
            assert not result.get("failed") and result["changed"] is False, result
        assert observed["records"] == {} and observed["_bin_lookups"] == plain["_bin_lookups"]
        assert set(observed["ansible_facts"]) == {"nvidia_gpu"}
        return plain["ansible_facts"]["nvidia_gpu"], observed["ansible_facts"]["nvidia_gpu"]
    return run


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_gives_the_facts_nvidia_gpu_facts_gives(both, fake_nvml, host_tree, profile, check_mode):
    plain, observed = both(host_tree(profile), lambda: fake_nvml(profile), check_mode=check_mode)
    assert observed == plain
    assert observed["state"] == ("no_gpu" if profile == "no_gpu" else "driver_not_loaded" if profile == "driver_not_loaded" else "ok")


@pytest.mark.parametrize("error", ["DriverNotLoaded", "Unknown", "LibraryNotFound"])
def test_nvml_raising_gives_the_same_state_and_messages(both, fake_nvml, host_tree, error):
    """nvmlInit raising (the CI sandbox kernel raises Unknown, 999): reported, not failed, the same in both."""
    profile = fake_pynvml.load_profile("driver_not_loaded")
    profile["nvml"]["init_error"] = error
    plain, observed = both(host_tree(profile), lambda: fake_nvml(profile))
    assert observed == plain
    assert (observed["state"], observed["source"], observed["present"]) == ("driver_not_loaded", "pci", True)
    assert any(m.startswith("NVML: nvmlInit failed") for m in observed["messages"]), observed["messages"]


def test_no_nvml_library_and_no_nvidia_smi(both, no_pynvml, host_tree):
    plain, observed = both(host_tree("t4"))
    assert observed == plain and observed["state"] == "library_not_found"
    assert "nvidia-smi: not found in PATH, not used" in observed["messages"]


def test_no_gpu_without_nvml(both, no_pynvml, host_tree):
    plain, observed = both(host_tree("no_gpu"))
    assert observed == plain
    assert (observed["state"], observed["present"], observed["gpus"]) == ("no_gpu", False, [])


def test_through_nvidia_smi(both, no_pynvml, fake_smi, host_tree):
    fake_smi.replay(stdout=os.path.join(OWN_XML, "t4_470.82.01_legacy.xml"))
    plain, observed = both(host_tree("t4"), smi=fake_smi)
    assert observed == plain and observed["source"] == "nvidia-smi"
    assert fake_smi.calls == [{"argv": ["-q", "-x"], "LC_ALL": "C"}] * 2  # once each, in the C locale


def test_the_default_root_is_nvidia_gpu_facts_default(run_module, no_pynvml, monkeypatch, tmp_path):
    roots = []
    monkeypatch.setattr(_facts, "gather_facts", lambda **kwargs: roots.append(kwargs["root"]) or {"state": "no_gpu"})
    run_module(nvidia_gpu_facts, {})
    result = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path), "gpu_facts": True})
    assert roots == ["/", "/"] and result["ansible_facts"] == {"nvidia_gpu": {"state": "no_gpu"}}


def test_without_gpu_facts_nothing_is_gathered(run_module, monkeypatch, tmp_path):
    monkeypatch.setattr(_facts, "gather_facts", lambda **kwargs: pytest.fail("gathered"))
    observed = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path)})
    assert "ansible_facts" not in observed and observed["records"] == {}
    # The other states ignore it (a probe is no place for facts), a bad root included.
    probe = run_module(gpuhost_converged, {"state": "probe", "path": str(tmp_path / "r.json"), "inputs_digest": "d",
                                           "gpu_facts": True, "gpu_facts_root": "relative"})
    assert not probe.get("failed") and "ansible_facts" not in probe and probe["converged"] is False


# -- a bad root: refused before anything is read, the records and the deferred calls included -----------------------
ROOT_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "mnt/image"), ("traversal", "/mnt/image/../../etc"), ("long-component", "/" + "r" * 300),
]


@pytest.fixture
def untouched(monkeypatch, tmp_path):
    """A records directory with one record, a deferred record call for it, and every reader made to fail the test."""
    records = tmp_path / "converged"
    records.mkdir()
    (records / "gpu_compose.json").write_text("{}\n")
    for name in ("observe_all", "flush", "observe", "read_record"):
        monkeypatch.setattr(_converged_host, name, lambda *args, **kwargs: pytest.fail("read before the root was checked"))
    monkeypatch.setattr(_facts, "gather_facts", lambda **kwargs: pytest.fail("gathered under a bad root"))
    deferred = [{"state": "record", "path": str(records / "nvidia_driver.json"), "inputs_digest": "d"}]
    return {"state": "observe", "path": str(records), "gpu_facts": True, "records": deferred}


def assert_refused(result, value, before, tmp_path, run_module):
    hostile.assert_refused(result, "gpu_facts_root", value, before=before, roots=[str(tmp_path)])
    # nvidia_gpu_facts' check of its root, for this option (_facts.root_errors; that module still writes it out itself).
    assert result["errors"] == _facts.root_errors(value, "gpu_facts_root")
    assert run_module(nvidia_gpu_facts, {"root": value, "backends": ["pci"]})["errors"] == _facts.root_errors(value, "root")
    assert "ansible_facts" not in result and "records" not in result and result["errors"]
    # The fix: which variable to set, and to what.
    assert "gpuhost_facts_root" in result["msg"] and "an existing directory" in result["msg"], result["msg"]
    assert "no_gpu" not in result["msg"]


@pytest.mark.parametrize("value", [v for _i, v in ROOT_CASES], ids=[i for i, _v in ROOT_CASES])
def test_root_values_refused(run_module, untouched, tmp_path, value):
    before = hostile.snapshot(str(tmp_path))
    assert_refused(run_module(gpuhost_converged, dict(untouched, gpu_facts_root=value)), value, before, tmp_path, run_module)


@pytest.mark.parametrize("kind", [k for k in hostile.SPECIAL_KINDS if k != "directory"] + ["missing", "file"])
def test_root_that_is_not_a_directory_is_refused(run_module, untouched, tmp_path, kind):
    special = hostile.make_special_cases(str(tmp_path))
    value = {"missing": str(tmp_path / "not-mounted"), "file": str(tmp_path / "a-file")}.get(kind) or special[kind]
    before = hostile.snapshot(str(tmp_path))
    result = run_module(gpuhost_converged, dict(untouched, gpu_facts_root=value))
    assert_refused(result, value, before, tmp_path, run_module)
    assert result["msg"].startswith(result["errors"][0] + "; the GPU facts were not gathered and no record was read")


# -- the action plugin: the facts pass through beside the observation's own fact -------------------------------------
class Controller(converged_harness.Controller):
    def observe(self, root, check_mode=False):
        return self.run({"state": "observe", "gpu_facts": True, "gpu_facts_root": root}, register=_converged.OBSERVATION_VAR,
                        check_mode=check_mode)


def test_the_action_passes_the_facts_through_and_the_observation_holds(module, host, fake_nvml, host_tree, run_module, monkeypatch):
    monkeypatch.setattr(converged_harness.action_plugin, "RECORD_DIR", str(host["records"]))  # site.yml passes no path
    root = host_tree("a100_mig")
    fake_nvml("a100_mig")
    expected = run_module(nvidia_gpu_facts, {"root": root})["ansible_facts"]["nvidia_gpu"]
    controller = Controller(module)
    fake_nvml("a100_mig")
    result = controller.observe(root)
    facts = controller.vars["ansible_facts"]
    assert facts["nvidia_gpu"] == expected and len(controller.remote) == 1
    status = facts[_converged.OBSERVATION_FACT]
    assert status == {"id": result["id"], "playbook": converged_harness.PLAYBOOK, "trusted": True, "used": []}
    # A probe after it answers from the observation, on the controller, as before.
    path = str(host["records"] / "gpu_compose.json")
    probe = controller.run({"state": "probe", "path": path, "inputs_digest": "d"})
    assert len(controller.remote) == 1 and probe["drift"] == ["no usable record (no record at %s): the next run is a full run" % path]
    assert controller.vars["ansible_facts"][_converged.OBSERVATION_FACT]["used"] == [path]


def test_check_mode_gathers_nothing_and_is_skipped(module, host, host_tree):
    controller = Controller(module)
    result = controller.observe(host_tree("t4"), check_mode=True)
    assert result["skipped"] and not result["changed"] and controller.remote == []
    assert "nvidia_gpu" not in controller.vars["ansible_facts"] and _converged.OBSERVATION_FACT not in controller.vars["ansible_facts"]
