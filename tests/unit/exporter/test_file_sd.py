# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The exporters' Prometheus file_sd (filter gpu_exporter_file_sd, playbooks/exporter.yml's second play).

A target is ``host:port``: a host name (RFC 1123), an IPv4 address or an IPv6 address in brackets, and a port in
1-65535. Prometheus itself keeps almost any string as a target and only fails its scrapes (promtool 2.42 accepts
``ho st:0``), so anything else is refused when the playbook runs, naming the host. What is accepted is checked by
Debian's real ``promtool check config`` on a configuration that reads the written file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import typing as t
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.report import gpu_exporter_file_sd
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

ROOT = Path(__file__).resolve().parents[3]
FACTS = {"driver": {"version": "580.65.06"}, "gpus": [{"index": 0, "name": "NVIDIA L4"}, {"index": 1, "name": "NVIDIA L4"}]}

# (address, port) -> the target written
VALID = [
    ("10.0.0.2", 9835, "10.0.0.2:9835"),
    ("192.168.255.254", "9400", "192.168.255.254:9400"),
    ("127.0.0.1", 1, "127.0.0.1:1"),
    ("gpu01", 65535, "gpu01:65535"),
    ("gpu01.example.net", 9400, "gpu01.example.net:9400"),
    ("gpu01.example.net.", 9400, "gpu01.example.net.:9400"),
    ("GPU-01.Example.NET", 9400, "GPU-01.Example.NET:9400"),
    ("1gpu.example", 9400, "1gpu.example:9400"),
    ("a", 9400, "a:9400"),
    ("x" * 63 + ".example", 9400, "x" * 63 + ".example:9400"),
    (".".join(["a" * 61] * 4), 9400, ".".join(["a" * 61] * 4) + ":9400"),
    ("xn--bcher-kva.example", 9400, "xn--bcher-kva.example:9400"),
    ("fd00::1", 9400, "[fd00::1]:9400"),
    ("[fd00::1]", 9400, "[fd00::1]:9400"),
    ("2001:db8::8a2e:370:7334", "00080", "[2001:db8::8a2e:370:7334]:80"),
    ("::1", 9400, "[::1]:9400"),
    ("::ffff:10.0.0.1", 9400, "[::ffff:10.0.0.1]:9400"),
]

# (address, port, what the message names)
INVALID_ADDRESSES = [
    ("", "address ''"),
    (" ", "address ' '"),
    (" gpu01", "address ' gpu01'"),
    ("gpu01 ", "address 'gpu01 '"),
    ("gpu 01", "address 'gpu 01'"),
    ("gpu01\n", "address 'gpu01\\n'"),
    ("gpu01\r\nevil:1", "address 'gpu01\\r\\nevil:1'"),
    ("gpu01\x00", "address 'gpu01\\x00'"),
    ("gpu01:9400", "address 'gpu01:9400'"),
    ("10.0.0.1:9400", "address '10.0.0.1:9400'"),
    ("[10.0.0.1]", "address '[10.0.0.1]'"),
    ("[gpu01]", "address '[gpu01]'"),
    ("http://gpu01", "address 'http://gpu01'"),
    ("gpu01/metrics", "address 'gpu01/metrics'"),
    ("gpu01?x=1", "address 'gpu01?x=1'"),
    ("user@gpu01", "address 'user@gpu01'"),
    ("-gpu01", "address '-gpu01'"),
    ("gpu01-", "address 'gpu01-'"),
    ("gpu_01", "address 'gpu_01'"),
    ("a..b", "address 'a..b'"),
    (".gpu01", "address '.gpu01'"),
    ("gpu01..", "address 'gpu01..'"),
    (".", "address '.'"),
    ("x" * 64 + ".example", "address 'xxxx"),
    (".".join(["a" * 62] * 5), "address 'aaaa"),
    ("gpü01.example", "address 'gpü01.example'"),
    ("host.123", "address 'host.123'"),
    ("=HYPERLINK(1)", "address '=HYPERLINK(1)'"),
    ("{{ 7 * 7 }}", "address '{{ 7 * 7 }}'"),
    ("1.2.3.256", "address '1.2.3.256'"),
    ("256.1.1.1", "address '256.1.1.1'"),
    ("1.2.3", "address '1.2.3'"),
    ("1.2.3.4.5", "address '1.2.3.4.5'"),
    ("010.0.0.1", "address '010.0.0.1'"),
    ("0.0.0.0", "address '0.0.0.0'"),
    ("255.255.255.255", "address '255.255.255.255'"),
    ("224.0.0.1", "address '224.0.0.1'"),
    ("::", "address '::'"),
    ("ff02::1", "address 'ff02::1'"),
    ("fe80::1%eth0", "address 'fe80::1%eth0'"),
    ("[fe80::1%eth0]", "address '[fe80::1%eth0]'"),
    ("[::1", "address '[::1'"),
    ("::1]", "address '::1]'"),
    ("[[::1]]", "address '[[::1]]'"),
    ("fd00:::1", "address 'fd00:::1'"),
    ("[fd00::1]:9400", "address '[fd00::1]:9400'"),
    (None, "address None (null)"),
    (167772161, "address 167772161 (an integer)"),
    (True, "address True (a boolean)"),
    (["10.0.0.1"], "address ['10.0.0.1'] (a list)"),
    ({"ip": "10.0.0.1"}, "address {'ip': '10.0.0.1'} (a mapping)"),
]

INVALID_PORTS = [
    (0, "port 0 (an integer)"),
    (-1, "port -1 (an integer)"),
    (65536, "port 65536 (an integer)"),
    (99999, "port 99999 (an integer)"),
    (2 ** 64, "port 18446744073709551616"),
    ("0", "port '0'"),
    ("65536", "port '65536'"),
    ("000009400", "port '000009400'"),
    ("", "port ''"),
    ("abc", "port 'abc'"),
    (" 9400", "port ' 9400'"),
    ("9400 ", "port '9400 '"),
    ("9400\n", "port '9400\\n'"),
    ("+9400", "port '+9400'"),
    ("-9400", "port '-9400'"),
    ("0x24b8", "port '0x24b8'"),
    ("94.00", "port '94.00'"),
    ("٩٤٠٠", "port '٩٤٠٠'"),
    (9400.0, "port 9400.0 (a number)"),
    (float("nan"), "port nan (a number)"),
    (float("inf"), "port inf (a number)"),
    (True, "port True (a boolean)"),
    (False, "port False (a boolean)"),
    (None, "port None (null)"),
    ([9400], "port [9400] (a list)"),
]


def target(host: str, address: t.Any, port: t.Any, **extra: t.Any) -> dict[str, t.Any]:
    return {"host": host, "address": address, "port": port, "kind": "dcgm", "facts": FACTS, **extra}


@pytest.mark.parametrize("address, port, expected", VALID, ids=[v[2][:40] for v in VALID])
def test_valid_targets_are_written_as_host_port(address, port, expected):
    entries = gpu_exporter_file_sd([target("gpu-a", address, port)])
    assert entries == [{"targets": [expected], "labels": {
        "gpuhost_host": "gpu-a", "gpuhost_exporter": "dcgm", "gpuhost_gpu_model": "NVIDIA L4", "gpuhost_gpu_count": "2",
        "gpuhost_driver_version": "580.65.06"}}]


@pytest.mark.parametrize("address, shown", INVALID_ADDRESSES, ids=[f"address{i}" for i in range(len(INVALID_ADDRESSES))])
def test_invalid_address_is_refused_naming_the_host_the_value_and_the_fix(address, shown):
    with pytest.raises(AnsibleFilterError) as caught:
        gpu_exporter_file_sd([target("gpu-good", "10.0.0.1", 9400), target("gpu-bad", address, 9400)])
    message = str(caught.value)
    assert "host 'gpu-bad'" in message and shown in message and "gpu_exporter_scrape_host" in message, message
    assert "gpu-good" not in message and "1 target(s)" in message


@pytest.mark.parametrize("port, shown", INVALID_PORTS, ids=[f"port{i}" for i in range(len(INVALID_PORTS))])
def test_invalid_port_is_refused_naming_the_host_the_value_and_the_fix(port, shown):
    with pytest.raises(AnsibleFilterError) as caught:
        gpu_exporter_file_sd([target("gpu-bad", "10.0.0.1", port), target("gpu-good", "gpu02", 9835)])
    message = str(caught.value)
    assert "host 'gpu-bad'" in message and shown in message and "gpu_exporter_port" in message, message
    assert "gpu-good" not in message


def test_every_bad_target_is_named_in_one_refusal():
    targets = [target(f"gpu-{i}", address, 9400) for i, (address, _shown) in enumerate(INVALID_ADDRESSES)]
    targets += [target(f"port-{i}", "10.0.0.1", port) for i, (port, _shown) in enumerate(INVALID_PORTS)]
    targets.append(target("gpu-good", "10.0.0.9", 9400))
    errors = _report.file_sd_errors(targets)
    assert len(errors) == len(INVALID_ADDRESSES) + len(INVALID_PORTS)
    for i in range(len(INVALID_ADDRESSES)):
        assert sum(1 for e in errors if e.startswith(f"host 'gpu-{i}':")) == 1
    with pytest.raises(ValueError):
        _report.file_sd(targets)


@pytest.mark.parametrize("targets, shown", [
    ("10.0.0.1:9400", "the targets are a string"),
    ({"host": "a"}, "the targets are a mapping"),
    (None, "the targets are null"),
    ([None], "target 1 is null"),
    (["10.0.0.1:9400"], "target 1 is a string"),
    ([target("a", "10.0.0.1", 9400), [1]], "target 2 is a list"),
    ([{"address": "10.0.0.1", "port": 9400}], "target 1 ('10.0.0.1') names no inventory host"),
    ([target("", "10.0.0.1", 9400)], "names no inventory host (host is '')"),
    ([target(None, "10.0.0.1", 9400)], "names no inventory host (host is None (null))"),
    ([target(5, "10.0.0.1", 9400)], "names no inventory host (host is 5 (an integer))"),
    ([{"host": "a"}], "host 'a': address None (null)"),
])
def test_targets_of_the_wrong_shape_are_refused(targets, shown):
    with pytest.raises(AnsibleFilterError) as caught:
        gpu_exporter_file_sd(targets)
    assert shown in str(caught.value)


@pytest.mark.parametrize("facts", [None, "a string", 5, [], {"gpus": "x"}, {"gpus": [None, 1, "x"]}, {"driver": "580"},
                                   {"driver": {"version": ["580"]}}, {"gpus": [{"name": ["x"]}]}, {"gpus": [{"name": float("nan")}]}])
def test_labels_from_malformed_facts_do_not_crash(facts):
    entries = gpu_exporter_file_sd([target("gpu-a", "10.0.0.1", 9400, facts=facts)])
    assert entries[0]["targets"] == ["10.0.0.1:9400"]
    assert all(isinstance(value, str) for value in entries[0]["labels"].values())
    json.loads(json.dumps(entries, allow_nan=False))


def promtool_check(tmp_path: Path, entries: list[dict[str, t.Any]]) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("tool missing: promtool (prometheus, bindep.txt; tests/deps/install.sh)")
    sd_file = tmp_path / "gpu_exporters.json"
    sd_file.write_text(json.dumps(entries, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [{"job_name": "gpu", "file_sd_configs": [{"files": [str(sd_file)]}]}]}),
                      encoding="utf-8")
    proc = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_accepts_every_valid_target(tmp_path):
    entries = gpu_exporter_file_sd([target(f"gpu-{i}", address, port) for i, (address, port, _expected) in enumerate(VALID)])
    assert sorted(e["targets"][0] for e in entries) == sorted(expected for _a, _p, expected in VALID)
    promtool_check(tmp_path, entries)


def test_promtool_is_a_real_check(tmp_path):
    """The same promtool refuses a target that is a URL path, so the check above can fail."""
    with pytest.raises(AssertionError, match="not a valid hostname"):
        promtool_check(tmp_path, [{"targets": ["gpu01/metrics:9400"], "labels": {"host": "x"}}])


# --- playbooks/exporter.yml's file_sd play, run for real on the controller ------------------------------------------
RULES = ROOT / "roles" / "gpu_exporter" / "files" / "alerts" / "gpuhost-gpu.rules.yml"


def file_sd_play(path: Path, **variables: t.Any) -> dict[str, t.Any]:
    plays = yaml.safe_load((ROOT / "playbooks" / "exporter.yml").read_text(encoding="utf-8"))
    play = next(p for p in plays if "file_sd" in p["name"])
    # The play runs from a copy under tmp_path: the rules file is read from the repository, where playbook_dir points
    # when the collection's playbook runs.
    play["vars"].update(gpuhost_file_sd_path=str(path), __gpuhost_rules_src=str(RULES), **variables)
    return play


def test_playbook_writes_a_file_promtool_accepts(local_play, tmp_path):
    """The file_sd file, and with gpuhost_alert_rules the collection's rules next to it, both accepted by promtool."""
    path = tmp_path / "prometheus" / "gpu_exporters.json"
    hosts = {f"gpu-{i}": {"gpu_exporter_target": target(f"gpu-{i}", address, port)} for i, (address, port, _e) in enumerate(VALID[:6])}
    hosts["absent"] = {"gpu_exporter_target": {}}
    hosts["no-role"] = {}
    local_play([file_sd_play(path, gpuhost_alert_rules=True)], check=False, hosts=hosts)
    entries = json.loads(path.read_text(encoding="utf-8"))
    assert [e["labels"]["gpuhost_host"] for e in entries] == sorted(f"gpu-{i}" for i in range(6))
    promtool_check(tmp_path, entries)
    rules = path.parent / "gpuhost-gpu.rules.yml"
    assert rules.read_bytes() == RULES.read_bytes() and rules.stat().st_mode & 0o777 == 0o644
    proc = subprocess.run([shutil.which("promtool") or "promtool", "check", "rules", str(rules)], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_playbook_refuses_a_rules_path_outside_the_named_directory(local_play, tmp_path):
    path = tmp_path / "prometheus" / "gpu_exporters.json"
    bad = f"{tmp_path}/prometheus/../../etc/gpuhost.rules.yml"
    hosts = {"gpu-good": {"gpu_exporter_target": target("gpu-good", "10.0.0.1", 9400)}}
    results = local_play([file_sd_play(path, gpuhost_alert_rules_path=bad)], check=False, hosts=hosts)
    check = results["gpu-good"]["Check the alert rules path"]
    assert check["failed"] and f"gpuhost_alert_rules_path is \"{bad}\"" in check["msg"], check
    assert not path.parent.exists(), "nothing written, not even the directory"


def test_playbook_refuses_a_bad_target_by_host_and_writes_nothing(local_play, tmp_path):
    path = tmp_path / "prometheus" / "gpu_exporters.json"
    hosts = {"gpu-good": {"gpu_exporter_target": target("gpu-good", "10.0.0.1", 9400)},
             "gpu-bad": {"gpu_exporter_target": target("gpu-bad", "gpu-bad:9400", 9400)},
             "gpu-port": {"gpu_exporter_target": target("gpu-port", "10.0.0.3", 70000)}}
    for check in (True, False):
        results = local_play([file_sd_play(path)], check=check, hosts=hosts)
        failed = [task for host in results.values() for task in host.values() if task.get("failed")]
        assert failed, results
        message = failed[0]["msg"]
        assert "host 'gpu-bad'" in message and "'gpu-bad:9400'" in message and "host 'gpu-port'" in message, message
        assert "70000" in message and "gpu_exporter_scrape_host" in message and "gpu_exporter_port" in message
        assert not path.parent.exists(), "nothing written, not even the directory"


def test_playbook_checks_the_scrape_address_before_installing_anything(local_play, tmp_path):
    """playbooks/exporter.yml's first play, with a stand-in role that carries gpu_exporter's defaults and only
    records that it ran: a bad address or port fails its host before the role, the others go on."""
    role = tmp_path / "roles" / "exporter_stand_in"
    (role / "defaults").mkdir(parents=True)
    (role / "tasks").mkdir()
    shutil.copy(ROOT / "roles" / "gpu_exporter" / "defaults" / "main.yml", role / "defaults" / "main.yml")
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump([{"name": "Stand-in role ran", "ansible.builtin.debug": {"msg": "ran"}}]),
                                             encoding="utf-8")
    plays = yaml.safe_load((ROOT / "playbooks" / "exporter.yml").read_text(encoding="utf-8"))
    play = next(p for p in plays if p.get("roles"))
    play.update(roles=[{"role": str(role)}], gather_facts=False)
    hosts = {"gpu-name": {"ansible_host": "gpu01.example.net"}, "gpu-ip6": {"gpu_exporter_scrape_host": "fd00::1", "gpu_exporter_port": 9835},
             "gpu-url": {"gpu_exporter_scrape_host": "http://gpu01:9400/metrics"}, "gpu-port": {"gpu_exporter_port": 70000},
             "gpu-gone": {"gpu_exporter_scrape_host": "gpu 01", "gpu_exporter_state": "absent"}}
    results = local_play([play], check=True, hosts=hosts)
    check = "Check the address and port Prometheus will scrape"
    ran = {name for name, tasks in results.items() if any(task.endswith("Stand-in role ran") for task in tasks)}
    assert ran == {"gpu-name", "gpu-ip6", "gpu-gone"}
    assert results["gpu-gone"][check].get("skipped")
    for name, value in (("gpu-url", "'http://gpu01:9400/metrics'"), ("gpu-port", "port 70000")):
        message = results[name][check]["msg"]
        assert results[name][check]["failed"] and f"host '{name}'" in message and value in message, message
