# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shipped Prometheus alert rules: Debian's real promtool checks them and runs their unit tests (alerts.test.yml:
cases that fire and cases that must not, in both exporters' published names); every rule has a severity and a
runbook that names doctor checks that exist; the test inputs themselves use only published names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor

from . import promql_names as pq
from .test_vocabulary import EXPORTERS, TARGET_LABELS

ROOT = pq.ROOT
RULES = ROOT / "roles" / "gpu_exporter" / "files" / "alerts" / "gpuhost-gpu.rules.yml"
UNIT_TESTS = Path(__file__).with_name("alerts.test.yml")
SEVERITIES = {"critical", "warning"}


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"] for rule in group["rules"]]


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("tool missing: promtool (prometheus, bindep.txt; tests/deps/install.sh)")
    return promtool


def _unit_test(tmp_path: Path, rules_text: str) -> subprocess.CompletedProcess:
    """promtool test rules on alerts.test.yml against these rules, their annotations dropped (promtool compares
    annotations exactly; `check rules` parses their templates)."""
    data = yaml.safe_load(rules_text)
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "gpuhost-gpu.rules.yml").write_text(yaml.safe_dump(data), encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return subprocess.run([_promtool(), "test", "rules", UNIT_TESTS.name], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)


def test_promtool_checks_the_shipped_rules():
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass(tmp_path):
    proc = _unit_test(tmp_path, RULES.read_text(encoding="utf-8"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("old, new, alert", [
    ("DCGM_FI_DEV_GPU_TEMP > 85", "DCGM_FI_DEV_GPU_TEMP > 95", "GpuTemperatureHigh"),
    ('err_code=~"48|64|74|79|', 'err_code=~"13|48|64|74|', "GpuXidCritical"),
    ("expr: DCGM_FI_DEV_ROW_REMAP_PENDING > 0\n        for: 15m", "expr: DCGM_FI_DEV_ROW_REMAP_PENDING > 0\n        for: 1m",
     "GpuRowRemapPending"),
    ("and on (instance) (up == 1)", "", "GpuFallenOffBus"),
    ("nvidia_smi_command_exit_code != 0", "nvidia_smi_command_exit_code > 9", "GpuNvidiaSmiFailing"),
    ("nvidia_smi_gpu_recovery_action > 0", "nvidia_smi_gpu_recovery_action > 2", "GpuRecoveryActionRequired"),
    ("expr: nvidia_smi_persistence_mode == 0\n        for: 15m", "expr: nvidia_smi_persistence_mode == 0\n        for: 1h",
     "GpuPersistenceModeOff"),
    ("severity: critical\n          source: dcgm", "severity: warning\n          source: dcgm", "GpuXidCritical"),
])
def test_the_unit_tests_fail_on_a_changed_rule(tmp_path, old, new, alert):
    text = RULES.read_text(encoding="utf-8")
    assert old in text
    proc = _unit_test(tmp_path, text.replace(old, new, 1))
    assert proc.returncode != 0 and f"alertname: {alert}" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_every_alert_has_a_severity_and_a_runbook_naming_existing_doctor_checks():
    rules = _rules()
    assert len(rules) >= 15 and all("alert" in rule for rule in rules)
    for rule in rules:
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        named = [name for found in re.findall(r"read its ([a-z_, ]+?) checks?\b", annotations["description"])
                 for name in re.split(r",\s*|\s+and\s+", found)]
        if rule["alert"] != "GpuExporterTargetsAbsent":  # Prometheus' own configuration: no host to run the doctor on
            assert "doctor" in annotations["description"] and named, rule["alert"]
        assert set(named) <= set(_doctor.CHECK_IDS), (rule["alert"], sorted(set(named) - set(_doctor.CHECK_IDS)))


def test_the_rules_cover_what_gpu_ops_page_on():
    exprs = " ".join(rule["expr"] for rule in _rules())
    for metric in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                   "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                   "DCGM_FI_DEV_PERSISTENCE_MODE", "nvidia_smi_command_exit_code", "nvidia_smi_temperature_gpu", "up{",
                   "nvidia_smi_ecc_errors_uncorrected_volatile_total", "nvidia_smi_remapped_rows_failure",
                   "nvidia_smi_remapped_rows_pending", "nvidia_smi_gpu_recovery_action", "nvidia_smi_persistence_mode"):
        assert metric in exprs, metric
    tested = set(re.findall(r"alertname: (\w+)", UNIT_TESTS.read_text(encoding="utf-8")))
    assert {rule["alert"] for rule in _rules()} <= tested


def _series(selector: str) -> tuple[str, set[str]]:
    match = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}", selector)
    assert match, selector
    return match.group(1), set(re.findall(r'([A-Za-z_]\w*)="', match.group(2)))


def test_unit_test_inputs_use_only_published_names():
    """Each input series is one an exporter publishes (metric and labels), or Prometheus' up, with the target labels."""
    data = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))
    selectors = [s["series"] for case in data["tests"] for s in case["input_series"]]
    assert selectors
    common = pq.PROMETHEUS_TARGET_LABELS | TARGET_LABELS
    for selector in selectors:
        metric, labels = _series(selector)
        published = [metrics[metric] for metrics in EXPORTERS.values() if metric in metrics]
        if metric in pq.PROMETHEUS_SERIES:
            published = [set()]
        assert published, f"{metric} is published by no exporter"
        assert labels <= common | published[0], (metric, sorted(labels - common - published[0]))
