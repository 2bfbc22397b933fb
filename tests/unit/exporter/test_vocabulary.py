# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The exporters' published vocabulary (tests/repos/vocabulary/*.json) against everything that names metrics.

Every dashboard and rule expression the role ships uses only metric and label names the exporters publish (plus
Prometheus' instance, job and the file_sd labels the collection writes); the stub exporters emit exactly those names;
the file_sd labels cannot collide with an exporter's labels. The negative tables prove the check fails.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

from . import promql_names as pq
from .test_exporter import GPUS, scrape, start

ROOT = pq.ROOT
ROLE = ROOT / "roles" / "gpu_exporter"
DASHBOARDS = sorted((ROLE / "files").rglob("*.json"))
RULE_FILES = sorted(p for p in (ROLE / "files").rglob("*.y*ml") if "groups" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}))
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
COLLECTORS = DEFAULTS["gpu_exporter_dcgm_collectors"]
DCGM = pq.load("dcgm-exporter")
NVGPU = pq.load("nvidia_gpu_exporter")
FILE_SD_LABELS = set(_report.file_sd([{"host": "h", "address": "10.0.0.1", "port": 9400, "kind": "dcgm", "facts": {}}])[0]["labels"])
TARGET_LABELS = FILE_SD_LABELS
EXPORTERS = {"dcgm-exporter": pq.dcgm_labels(COLLECTORS), "nvidia_gpu_exporter": pq.nvidia_gpu_exporter_labels()}


def every_exporter_label() -> set[str]:
    """Every label either exporter can put on a series, with any collectors CSV."""
    return (set(DCGM["labels"]) | set(DCGM["mig_labels"]) | {x for v in DCGM["metric_labels"].values() for x in v}
            | set(DCGM["label_fields"]) | set(DCGM["optional_label_fields"]) | set(NVGPU["info_metric"]["labels"]) | set(NVGPU["gpu_labels"]))


# --- the vocabulary itself ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab", [DCGM, NVGPU], ids=["dcgm-exporter", "nvidia_gpu_exporter"])
def test_vocabulary_names_its_source_and_docs_cite_it(vocab):
    source = vocab["source"]
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]) and source["repository"] and source["tag"] and source["files"]
    sources_md = (ROOT / "docs" / "sources.md").read_text(encoding="utf-8")
    assert source["commit"] in sources_md and source["repository"] in sources_md


def test_role_pins_the_versions_the_vocabulary_describes():
    """apt's exporter build is the vocabulary's release; dnf's rpm is a later build of the same 4.8 line (4.8.4.3955),
    whose metric names are still DCGM's field names of the same collectors CSV."""
    assert DEFAULTS["gpu_exporter_nvidia_gpu_exporter_version"] == NVGPU["version"]
    assert DEFAULTS["gpu_exporter_dcgm_exporter_version"] is None
    family_default = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))["__gpu_exporter_dcgm_exporter_default_version"]
    assert family_default["Debian"].split("-")[0] == DCGM["version"]
    assert family_default["RedHat"].split(".")[:2] == DCGM["version"].split(".")[:2]


def test_role_collectors_are_published_fields_with_their_published_type_and_help():
    published = {**DCGM["field_metrics"], **DCGM["optional_metrics"], **DCGM["metrics"]}
    for row in COLLECTORS:
        if row["type"] == "label":
            assert row["field"] in {**DCGM["label_fields"], **DCGM["optional_label_fields"]}, row
            continue
        assert row["field"] in published, row
        assert (row["type"], row["help"]) == (published[row["field"]]["type"], published[row["field"]]["help"]), row


@pytest.mark.parametrize("rows", [
    [{"field": "DCGM_FI_DEV_GPU_UTILIZATION", "type": "gauge", "help": "x"}],
    [{"field": "nvidia_smi_utilization_gpu_ratio", "type": "gauge", "help": "x"}],
    [{"field": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "help": "x"}, {"field": "DCGM_FI_DEV_GPU_UTIL", "type": "label", "help": "x"}],
    [{"field": "DCGM_FI_NOT_A_LABEL", "type": "label", "help": "x"}],
    [{"field": "dcgm_fi_dev_gpu_util", "type": "gauge", "help": "x"}],
])
def test_collectors_outside_the_vocabulary_are_refused(rows):
    with pytest.raises(pq.PromQLError):
        pq.dcgm_labels(rows)


def test_a_label_row_adds_that_label_to_every_metric_and_only_then():
    plain = pq.dcgm_labels(COLLECTORS)
    assert all("DCGM_FI_DRIVER_VERSION" not in labels for labels in plain.values())
    listed = pq.dcgm_labels([*COLLECTORS, {"field": "DCGM_FI_DRIVER_VERSION", "type": "label", "help": "Driver Version"}])
    assert set(listed) == set(plain) and all("DCGM_FI_DRIVER_VERSION" in labels for labels in listed.values())
    assert plain["DCGM_FI_DEV_XID_ERRORS"] - plain["DCGM_FI_DEV_GPU_UTIL"] == {"err_code", "err_msg"}


# --- the file_sd labels ------------------------------------------------------------------------------------------

def test_file_sd_labels_cannot_collide_with_an_exporter_label():
    """Prometheus keeps a target label and renames a scraped one of the same name to exported_<name> (honor_labels:
    false); with a prefix no exporter uses, every exporter label keeps its name."""
    assert FILE_SD_LABELS and all(label.startswith("gpuhost_") for label in FILE_SD_LABELS)
    assert not FILE_SD_LABELS & every_exporter_label()
    assert not {label for label in every_exporter_label() if label.lower().startswith("gpuhost_")}
    assert not FILE_SD_LABELS & pq.PROMETHEUS_TARGET_LABELS


# --- every expression the role ships -----------------------------------------------------------------------------

def test_the_role_ships_dashboards_to_check():
    assert len(DASHBOARDS) >= 2


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_uses_only_published_names(path):
    board = json.loads(path.read_text(encoding="utf-8"))
    assert pq.dashboard_problems(board, EXPORTERS, TARGET_LABELS) == []


def rule_file_problems(path: Path) -> list[str]:
    """Every unpublished name in a Prometheus rules file (groups of recording and alerting rules)."""
    groups = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("groups") or []
    rules = [r for g in groups for r in g.get("rules") or []]
    if not rules:
        return [f"{path.name}: no rules"]
    return [f"{path.name} {rule.get('alert') or rule.get('record')}: {p}" for rule in rules
            for p in pq.check(rule.get("expr"), EXPORTERS, TARGET_LABELS)]


def test_rule_files_use_only_published_names():
    """Every rules file under roles/gpu_exporter/files/ (the shipped alerts) is held to the vocabulary."""
    assert RULE_FILES
    assert [p for path in RULE_FILES for p in rule_file_problems(path)] == []


def test_rule_file_check_fails_on_an_unpublished_name(tmp_path):
    path = tmp_path / "gpu.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "gpu", "rules": [
        {"alert": "GpuHot", "expr": 'DCGM_FI_DEV_GPU_TEMP{gpuhost_host!=""} > 85'},
        {"alert": "CollectFailing", "expr": "nvidia_smi_last_collection_success == 0"},
        {"record": "gpu:util", "expr": "avg by (host) (DCGM_FI_DEV_GPU_UTIL)"}]}]}), encoding="utf-8")
    problems = rule_file_problems(path)
    assert len(problems) == 2 and "nvidia_smi_last_collection_success" in problems[0] and "label host" in problems[1], problems
    path.write_text("groups: []\n", encoding="utf-8")
    assert rule_file_problems(path) == ["gpu.rules.yml: no rules"]


def _exprs() -> list[str]:
    return [t["expr"] for path in DASHBOARDS for p in json.loads(path.read_text(encoding="utf-8"))["panels"] for t in p["targets"]]


def test_dashboard_expressions_are_valid_promql():
    """Debian's promtool parses every expression (the name check reads names; this proves the rest is PromQL)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("tool missing: promtool (prometheus, bindep.txt; tests/deps/install.sh)")
    rules = {"groups": [{"name": "dashboards", "rules": [{"record": f"gpuhost:check:{i}", "expr": e.replace("$host", ".*")}
                                                         for i, e in enumerate(_exprs())]}]}
    proc = subprocess.run([promtool, "check", "rules", "/dev/stdin"], input=yaml.safe_dump(rules), capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the check fails where it must -------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, legend, problem", [
    # names of another release, or made up: 1.14.0 has nvidia_smi_last_collect_success and pci_bus_id, index and
    # cuda_version on nvidia_smi_gpu_info only, not on the field metrics; the NVML backend's and the per-process
    # families are not served with the role's flags
    ("nvidia_smi_last_collection_success", None, "metric nvidia_smi_last_collection_success"),
    ('nvidia_smi_utilization_gpu_ratio{pci_bus_id="00000000:01:00.0"}', None, "label pci_bus_id"),
    ('count by (pci_bus_id) (nvidia_smi_temperature_gpu)', None, "label pci_bus_id"),
    ('nvidia_smi_memory_used_bytes{index="0"}', None, "label index"),
    ('nvidia_smi_gpu_info{cuda="12.9"}', None, "label cuda"),
    ("nvidia_smi_xid_errors_total", None, "metric nvidia_smi_xid_errors_total"),
    ("nvidia_smi_nvml_return_code", None, "metric nvidia_smi_nvml_return_code"),
    ("nvidia_smi_compute_app_info", None, "metric nvidia_smi_compute_app_info"),
    ("nvidia_smi_display_mode", None, "metric nvidia_smi_display_mode"),
    ('count by (name, driver_version) (DCGM_FI_DEV_GPU_UTIL)', None, "driver_version"),
    ('DCGM_FI_DEV_GPU_UTIL{DCGM_FI_DRIVER_VERSION="580.65.06"}', None, "label DCGM_FI_DRIVER_VERSION"),
    ('DCGM_FI_DEV_GPU_UTIL{exported_driver_version="580.65.06"}', None, "exported_driver_version"),
    ('DCGM_FI_DEV_GPU_UTIL{host=~"a"}', None, "label host"),
    ('up{exporter="dcgm"}', None, "label exporter"),
    # names that are close to published ones
    ("DCGM_FI_DEV_GPU_UTILIZATION", None, "metric DCGM_FI_DEV_GPU_UTILIZATION"),
    ("dcgm_fi_dev_gpu_util", None, "metric dcgm_fi_dev_gpu_util"),
    ('DCGM_FI_DEV_GPU_UTIL{uuid="x"}', None, "label uuid"),
    ('nvidia_smi_utilization_gpu_ratio{UUID="x"}', None, "label UUID"),
    ('nvidia_smi_utilization_gpu_ratio{name="x"}', None, "label name"),
    ('DCGM_FI_DEV_GPU_UTIL{err_code="0"}', None, "label err_code"),
    ("nvidia_smi_utilization_gpu", None, "metric nvidia_smi_utilization_gpu"),
    # a field the exporter publishes but the role's collectors do not list: no data
    ("DCGM_FI_DEV_RETIRED_DBE", None, "metric DCGM_FI_DEV_RETIRED_DBE"),
    ("DCGM_FI_PROF_SM_ACTIVE", None, "metric DCGM_FI_PROF_SM_ACTIVE"),
    # in every position PromQL takes a name
    ("rate(DCGM_FI_DEV_NO_SUCH[5m])", None, "metric DCGM_FI_DEV_NO_SUCH"),
    ("sum without (Hostnme) (DCGM_FI_DEV_GPU_UTIL)", None, "label Hostnme"),
    ("DCGM_FI_DEV_FB_USED / on (UUID, gpuhost_hots) DCGM_FI_DEV_FB_FREE", None, "label gpuhost_hots"),
    ("DCGM_FI_DEV_FB_USED * ignoring (modelname) DCGM_FI_DEV_FB_FREE", None, "label modelname"),
    ("DCGM_FI_DEV_FB_USED * on (gpu) group_left (vbios) DCGM_FI_DEV_FB_FREE", None, "label vbios"),
    ('{__name__="nvidia_smi_last_collection_success"}', None, "metric nvidia_smi_last_collection_success"),
    ('{__name__=~"DCGM_.*"}', None, "__name__"),
    ('{pci_bus_id="x"}', None, "label pci_bus_id"),
    ("max_over_time(nvidia_smi_temperature_gpu[1h]) offset 5m > on (uuid) bogus_metric", None, "metric bogus_metric"),
    ("DCGM_FI_DEV_GPU_UTIL", "{{host}} GPU {{gpu}}", "legend label host"),
    ("nvidia_smi_utilization_gpu_ratio", "{{ pci_bus_id }}", "legend label pci_bus_id"),
    # mixing the exporters in one expression
    ("DCGM_FI_DEV_GPU_UTIL + on (gpuhost_host) nvidia_smi_utilization_gpu_ratio", None, "mixes exporters"),
    # what the reader refuses rather than guess
    ('label_replace(DCGM_FI_DEV_GPU_UTIL, "x", "$1", "host", "(.*)")', None, "label_replace"),
    ('label_join(DCGM_FI_DEV_GPU_UTIL, "x", ",", "host")', None, "label_join"),
    ("nonsense_function(DCGM_FI_DEV_GPU_UTIL)", None, "unknown function"),
    ("sum(DCGM_FI_DEV_GPU_UTIL", None, "unbalanced"),
    ("DCGM_FI_DEV_GPU_UTIL}", None, "unbalanced"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu}', None, "not a label matcher"),
    ('DCGM_FI_DEV_GPU_UTIL{gpu="0"', None, "unclosed"),
    ("", None, "not an expression"),
    (None, None, "not an expression"),
    ("DCGM_FI_DEV_GPU_UTIL ; drop", None, "cannot read"),
])
def test_check_names_the_unpublished_name(expr, legend, problem):
    problems = pq.check(expr, EXPORTERS, TARGET_LABELS, legend)
    assert problems and any(problem in p for p in problems), problems


@pytest.mark.parametrize("expr, legend", [
    ('DCGM_FI_DEV_GPU_UTIL{gpuhost_host=~"$host", gpu!="1", modelName=~".*H100.*"}', "{{gpuhost_host}} GPU {{gpu}} {{UUID}}"),
    ('max by (gpuhost_host, gpu) (DCGM_FI_DEV_XID_ERRORS{err_code!="0"})', "{{gpuhost_host}} {{gpu}}"),
    ('DCGM_FI_DEV_FB_USED / on (UUID) (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)', "{{pci_bus_id}} {{device}} {{Hostname}}"),
    ("sum(rate(DCGM_FI_DEV_GPU_UTIL[$__rate_interval])) by (gpuhost_gpu_model)", "{{gpuhost_gpu_model}}"),
    ('count by (name, driver_version, vbios_version) (nvidia_smi_gpu_info{driver_model_current="[N/A]"})', "{{name}} {{driver_version}}"),
    ("nvidia_smi_memory_used_bytes / nvidia_smi_memory_total_bytes > 0.9", "{{uuid}} {{instance}} {{job}}"),
    ("nvidia_smi_command_exit_code != 0", "{{gpuhost_host}}"),
    ("nvidia_smi_last_collect_success == 0 and nvidia_smi_failed_scrapes_total > 0", "{{gpuhost_host}}"),
    ('count by (pci_bus_id, index, cuda_version, compute_cap, serial) (nvidia_smi_gpu_info{pci_bus_id=~"0000.*"})',
     "{{pci_bus_id}} {{index}} {{cuda_version}}"),
    ("nvidia_smi_remapped_rows_pending + on (uuid) nvidia_smi_gpu_recovery_action", "{{uuid}}"),
    ('up{gpuhost_exporter="nvidia_gpu_exporter", job="gpu"} == 0', "{{gpuhost_driver_version}} {{gpuhost_gpu_count}}"),
    ('{__name__="nvidia_smi_temperature_gpu", uuid=~".+"} offset 5m', None),
    ("avg_over_time(nvidia_smi_power_draw_watts[1h:5m]) * 1e3", None),
    ("topk(3, DCGM_FI_DEV_GPU_TEMP)", None),
    ("SUM BY (gpu) (DCGM_FI_DEV_GPU_UTIL) AND ON (gpu) DCGM_FI_DEV_GPU_TEMP > bool 80", "{{gpu}}"),
    ("DCGM_FI_DEV_GPU_UTIL @ start()", None),
    ("sum(DCGM_FI_DEV_GPU_UTIL{}) by (Hostname) / 0x10 + Inf", "{{Hostname}}"),
])
def test_check_passes_published_names(expr, legend):
    assert pq.check(expr, EXPORTERS, TARGET_LABELS, legend) == []


def _board(name: str) -> dict:
    return json.loads((ROLE / "files" / "dashboards" / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name, mutate, problem", [
    ("nvidia_gpu_exporter.json", lambda b: b["panels"][0]["targets"][0].update(expr="nvidia_smi_last_collection_success"),
     "nvidia_smi_last_collection_success"),
    ("nvidia_gpu_exporter.json", lambda b: b["panels"][0]["targets"][0].update(legendFormat="{{pci_bus_id}}"), "pci_bus_id"),
    ("dcgm.json", lambda b: b["templating"]["list"][1]["query"].update(query="label_values(DCGM_FI_DEV_GPU_UTIL, host)"), "host"),
    ("dcgm.json", lambda b: b["templating"]["list"][1]["query"].update(query="label_values(host)"), "label_values"),
    ("dcgm.json", lambda b: b["panels"].append({"title": "row", "panels": [{"title": "nested", "targets": [
        {"expr": "DCGM_FI_DEV_MADE_UP", "legendFormat": ""}]}]}), "DCGM_FI_DEV_MADE_UP"),
    ("dcgm.json", lambda b: b["panels"][0]["targets"][0].update(expr="count by (modelName) (DCGM_FI_DEV_GPU_UTIL)",
                                                                legendFormat="{{gpuhost_host}}"), "aggregated away"),
    ("dcgm.json", lambda b: b.update(panels=[], templating={"list": []}), "no query"),
    ("dcgm.json", lambda b: b["templating"]["list"][1].update(definition="label_values(DCGM_FI_DEV_GPU_UTIL, host)"), "host"),
    ("nvidia_gpu_exporter.json", lambda b: b["panels"][5]["targets"][0].update(expr="count by (name) (nvidia_smi_gpu_info)"),
     "aggregated away"),
])
def test_dashboard_check_fails_on_a_broken_dashboard(name, mutate, problem):
    board = copy.deepcopy(_board(name))
    mutate(board)
    problems = pq.dashboard_problems(board, EXPORTERS, TARGET_LABELS)
    assert any(problem in p for p in problems), problems


# --- the stubs emit exactly the vocabulary -----------------------------------------------------------------------

def _series(text: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? \S+", line)
            assert match, line
            out.append((match.group(1), dict(re.findall(r'([A-Za-z_]\w*)="([^"]*)"', match.group(2) or ""))))
    return out


def _csv(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    path = tmp_path / "collectors.csv"
    path.write_text("".join(f"{r['field']}, {r['type']}, {r['help']}\n" for r in rows), encoding="utf-8")
    return path


def test_dcgm_stub_emits_exactly_the_role_collectors_with_the_published_labels(tmp_path):
    series = _series(scrape(tmp_path, "dcgm-exporter", "-f", str(_csv(tmp_path, COLLECTORS))))
    expected = pq.dcgm_labels(COLLECTORS)
    assert {name for name, _labels in series} == set(expected)
    for name, labels in series:
        assert set(labels) == expected[name] - set(DCGM["mig_labels"]), (name, labels)
    assert len(series) == len(expected) * len(GPUS["gpus"])


def test_dcgm_stub_adds_the_driver_version_label_only_when_the_csv_lists_it(tmp_path):
    rows = [*COLLECTORS, {"field": "DCGM_FI_DRIVER_VERSION", "type": "label", "help": "Driver Version"}]
    series = _series(scrape(tmp_path, "dcgm-exporter", "-f", str(_csv(tmp_path, rows))))
    assert {labels["DCGM_FI_DRIVER_VERSION"] for _name, labels in series} == {GPUS["driver_version"]}
    assert "DCGM_FI_DRIVER_VERSION" not in {name for name, _labels in series}


@pytest.mark.parametrize("row", [
    {"field": "DCGM_FI_DEV_MADE_UP", "type": "gauge", "help": "x"},
    {"field": "DCGM_FI_DEV_GPU_UTIL", "type": "gaug", "help": "x"},
    {"field": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "help": "a, b"},
    {"field": "DCGM_FI_MADE_UP_LABEL", "type": "label", "help": "x"},
])
def test_dcgm_stub_refuses_a_field_outside_the_vocabulary(tmp_path, row):
    proc, _unused = start(tmp_path, "dcgm-exporter", "-f", str(_csv(tmp_path, [row])))
    try:
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "dcgm-exporter (stub)" in proc.stderr.read()


def test_nvidia_gpu_exporter_stub_emits_exactly_the_published_names_and_labels(tmp_path):
    series = _series(scrape(tmp_path, "nvidia_gpu_exporter"))
    expected = pq.nvidia_gpu_exporter_labels()
    # 1.14.0 serves the collection health metrics on every scrape after a successful collection, failed_scrapes_total too
    assert {name for name, _labels in series} == set(expected)
    for name, labels in series:
        assert set(labels) == expected[name], (name, labels)
    info = [labels for name, labels in series if name == "nvidia_smi_gpu_info"]
    assert {labels["uuid"] for labels in info} == {g["uuid"].lower().removeprefix("gpu-") for g in GPUS["gpus"]}
    # nvidia-smi's bus id (an eight-digit domain) and index, and the driver's CUDA version
    assert {(labels["pci_bus_id"], labels["index"]) for labels in info} == {
        ("0000" + g["pci_bus_id"].upper(), str(g["index"])) for g in GPUS["gpus"]}
    assert {labels["cuda_version"] for labels in info} == {GPUS.get("cuda_version", "")}


@pytest.mark.parametrize("scenario", ["gpu_exporter", "gpu_exporter_el"])
def test_the_molecule_scenario_queries_only_published_names(scenario):
    """The scenarios' own PromQL (their Prometheus checks, through molecule/resources/gpuhost_prometheus.py's query) is
    held to the same vocabulary as the dashboards."""
    text = "".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "molecule" / scenario / "tests").glob("test_*.py")))
    queries = re.findall(r'\bquery\(\s*(?:prometheus|base),\s*"([^"]+)"', text)
    assert len(queries) >= 3
    problems = [p for q in queries for p in pq.check(q, EXPORTERS, TARGET_LABELS) if "mixes exporters" not in p]
    assert problems == []
