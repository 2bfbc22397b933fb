# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The settings backends: one NVML session per run, one parse of each nvidia-smi output, and the facts' extension hooks."""

from __future__ import annotations

import os
import typing as t
import xml.etree.ElementTree as ET

import pytest

from conftest import ClockedFakeNVML, settings_profile  # pylint: disable=import-error
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings_apply
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings as module

HERE = os.path.dirname(os.path.abspath(__file__))
OWN_XML = os.path.normpath(os.path.join(HERE, "..", "fixtures", "nvidia-smi-xml"))


@pytest.fixture
def state_path(tmp_path: t.Any) -> str:
    return str(tmp_path / "run" / "gpuhost" / "nvidia_smi_settings.json")


def _sessions(fake: ClockedFakeNVML, before: int) -> tuple[int, int]:
    """nvmlInit calls and nvmlShutdown calls since the ``before``-th recorded call."""
    names = [call[0] for call in fake.calls[before:]]
    return names.count("nvmlInit"), names.count("nvmlShutdown")


def _idle_a100() -> dict[str, t.Any]:
    profile = settings_profile("a100_mig")
    profile["gpus"][0]["processes"] = []
    return profile


RUNS = [
    # name, profile, args, whether the request fails (after reading the GPUs)
    ("settings and locked clocks", "t4", {"power_limit": 65, "persistence_mode": False, "locked_clocks": {"min_mhz": 1200, "max_mhz": 1500}}, False),
    ("MIG layout", _idle_a100(), {"mig_layout": [{"profile": "7g.40gb"}], "compute_mode": "PROHIBITED"}, False),
    ("pending ECC and MIG", "h100_sxm_8x_nvswitch", {"gpus": ["2", "3"], "ecc": False, "mig": True}, False),
    ("refused for this GPU", "rtx3090", {"applications_clocks": {"reset": True}}, True),
]


@pytest.mark.parametrize("profile,args,fails", [r[1:] for r in RUNS], ids=[r[0] for r in RUNS])
def test_every_settings_run_initialises_nvml_exactly_once(settings_nvml, run_module, state_path, profile, args, fails):
    fake = settings_nvml(profile)
    args = dict(args, state_path=state_path)
    for check_mode in (True, False, True, False):
        before = len(fake.calls)
        result = run_module(module, args, check_mode=check_mode)
        assert bool(result.get("failed")) is fails, result
        assert fake.init_calls == fake.calls.count(("nvmlInit", None))
        assert _sessions(fake, before) == (1, 1), (check_mode, [c[0] for c in fake.calls[before:] if c[0].startswith("nvml") and "Get" not in c[0]])
        assert fake.initialised == 0
    assert fake.init_calls == 4


def test_a_run_that_changes_settings_reads_applies_and_reads_again_in_one_session(settings_nvml, run_module, state_path):
    fake = settings_nvml("t4")
    result = run_module(module, {"power_limit": 65, "state_path": state_path})
    assert result["changed"] is True and result["source"] == "nvml"
    names = [call[0] for call in fake.calls]
    setter = names.index("nvmlDeviceSetPowerManagementLimit")
    assert names.count("nvmlInit") == 1 and names.index("nvmlInit") < setter < names.index("nvmlShutdown") == len(names) - 1
    # The read after the change is in the same session: the getters run again after the setter.
    assert "nvmlDeviceGetPowerManagementLimit" in names[setter:]


def test_nvml_is_shut_down_before_a_gpu_reset(settings_nvml, run_module, state_path, smi_reset, fake_smi):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    smi_reset(fake)
    initialised_at_reset: list[int] = []
    reset = fake.reset

    def watched_reset(bus_id: str) -> None:
        initialised_at_reset.append(fake.initialised)
        reset(bus_id)

    fake.reset = watched_reset  # type: ignore[method-assign]
    result = run_module(module, {"gpus": ["1"], "ecc": False, "reset_gpus": True, "state_path": state_path}, smi=fake_smi)
    assert result["changed"] is True and result["gpus"][0]["pending"] == []
    assert initialised_at_reset == [0], "nvidia-smi --gpu-reset ran while this module held an NVML session"
    assert fake.init_calls == 1


def test_a_failed_nvml_init_is_one_attempt_then_nvidia_smi(settings_nvml, run_module, state_path, fake_smi):
    profile = settings_profile("t4")
    profile["nvml"]["init_error"] = "Unknown"
    fake = settings_nvml(profile)
    fake_smi.replay(stdout=os.path.join(OWN_XML, "t4_470.82.01_legacy.xml"))
    result = run_module(module, {"power_limit": 65, "state_path": state_path}, smi=fake_smi, check_mode=True)
    assert result["source"] == "nvidia-smi" and result["changed"] is True
    assert (fake.init_calls, fake.init_count, fake.shutdown_count) == (1, 0, 0)


def test_each_nvidia_smi_output_is_parsed_once(no_pynvml, run_module, fake_smi, state_path, monkeypatch):
    parses: list[int] = []
    fromstring = ET.fromstring

    def counting_fromstring(text: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
        parses.append(len(text))
        return fromstring(text, *args, **kwargs)

    monkeypatch.setattr(ET, "fromstring", counting_fromstring)
    fake_smi.replay(stdout=os.path.join(OWN_XML, "t4_470.82.01_legacy.xml"))
    args = {"power_limit": 65, "compute_mode": "DEFAULT", "state_path": state_path}
    check = run_module(module, args, smi=fake_smi, check_mode=True)
    assert check["changed"] is True and check["source"] == "nvidia-smi"
    assert len(parses) == 1
    # The clocks come from that one parse.
    assert check["gpus"][0]["settings"] == {"compute_mode": "DEFAULT", "power_limit": 65.0}
    result = run_module(module, args, smi=fake_smi)
    assert result["changed"] is True
    queries = [c for c in fake_smi.calls if c["argv"] == ["-q", "-x"]]
    assert len(queries) == 3 and len(parses) == 3, "one parse for each nvidia-smi -q -x (check, read, read after the change)"


def test_nvml_backend_reads_the_settings_in_the_facts_pass(settings_nvml):
    fake = settings_nvml("a100_mig")
    with _settings_apply.Session(fake.module) as session:
        current = _settings_apply.read_state(session, None, None, {})
    assert current["source"] == "nvml" and isinstance(current["backend"], _settings_apply.NvmlBackend)
    view = current["views"][0]
    assert view["supported_clocks"] and view["default_applications_clocks"] == {"memory_mhz": 1215, "graphics_mhz": 1095}
    assert view["mig_profiles"] and view["mig_instances"]
    names = [call[0] for call in fake.calls]
    # One pass over the GPUs: each handle is asked for once.
    assert names.count("nvmlDeviceGetHandleByIndex") == len(fake.visible_gpus)
    assert (fake.init_calls, fake.shutdown_count, fake.initialised) == (1, 1, 0)


def test_smi_backend_clocks_agree_with_the_capture_reader():
    xml_path = os.path.join(OWN_XML, "t4_470.82.01_legacy.xml")
    with open(xml_path, "r", encoding="utf-8") as handle:
        xml_text = handle.read()

    def run(argv: list[str]) -> tuple[int, str, str]:
        return 0, xml_text, ""

    backend = _settings_apply.SmiBackend(run, "nvidia-smi")
    views = backend.read({})["views"]
    extras = _settings_apply.smi_clock_extras(xml_text)
    assert len(views) == len(extras) == 1
    for key in ("applications_clocks", "default_applications_clocks", "supported_clocks"):
        assert views[0][key] == extras[0][key]
