# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report and the exporters' Prometheus file_sd: pure functions of the hosts' facts and doctor results.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

:func:`fleet_report` turns one entry per inventory host (``{host, status, facts, doctor, error}``, where status is
``ok``, ``failed`` or ``unreachable``) into rows, one per GPU (a host without GPUs, or one that could not be read, gets
one row of its own: nobody is dropped), problems first. A host's values are hostile input: an entry of the wrong shape
is one ``malformed facts`` row with the reasons, and no value keeps a control character. :func:`report_csv`,
:func:`report_json` and :func:`report_html` render it (a CSV a spreadsheet reads as text, strict JSON, a
self-contained page with inline CSS, JavaScript and SVG charts). :func:`file_sd` builds Prometheus' file-based service
discovery from the exporter targets, refusing every target that is not ``host:port``.
"""

from __future__ import annotations

import csv
import html
import io
import ipaddress
import json
import math
import re
import typing as t
from collections import Counter
from collections.abc import Mapping, Sequence

# Lower is worse: the order rows and hosts are shown in. ``malformed facts``: the entry or its facts or doctor result do not
# have the shape the report reads; ``unknown``: the doctor gave no status the report knows. Both count as problems.
HOST_STATUSES = ("unreachable", "failed", "malformed facts", "unknown", "fail", "warn", "ok")
_RANK = {status: rank for rank, status in enumerate(HOST_STATUSES)}
COLUMNS = ("host", "status", "gpu", "model", "memory_gib", "driver", "cuda", "mig", "binding", "health", "reboot", "problems")
ENTRY_STATUSES = ("ok", "failed", "unreachable")
DOCTOR_STATUSES = ("ok", "warn", "fail")
MALFORMED = "malformed facts"

# Characters no report cell keeps: C0 and C1 controls (a bare CR or LF forges rows in a CSV, an ESC rewrites a
# terminal), the Unicode line and paragraph separators, and lone surrogates (they cannot be written as UTF-8).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Longer values are cut: a host must not be able to blow up the page or the spreadsheet with one name.
TEXT_LIMIT = 256
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, CSV Injection; docs/sources.md). Tab,
# CR and LF are on that list too; clean_text() has already turned them into spaces, and a cell that starts with a space
# is neutralised as well. The full-width forms cost nothing to treat the same.
FORMULA_START = frozenset("=+-@\uff1d\uff0b\uff0d\uff20")


def clean_text(value: str, limit: int = TEXT_LIMIT) -> str:
    """One line of printable text: controls become spaces, and the text is cut to ``limit`` characters."""
    text = _CONTROL.sub(" ", value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


_KINDS = {"NoneType": "null", "str": "a string", "bytes": "bytes", "bool": "a boolean", "int": "an integer", "float": "a number",
          "list": "a list", "tuple": "a list", "dict": "a mapping"}


def _kind(value: t.Any) -> str:
    name = type(value).__name__
    return _KINDS.get(name, "a mapping" if isinstance(value, Mapping) else f"a {name}")


class _Reader:
    """Reads one host's entry defensively: each value of the wrong shape adds a reason, and nothing raises."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def bad(self, reason: str) -> None:
        self.reasons.append(reason)

    def mapping(self, value: t.Any, where: str, missing_ok: bool = True) -> Mapping[str, t.Any]:
        if value is None and missing_ok:
            return {}
        if isinstance(value, Mapping):
            return value
        self.bad(f"{where} is {_kind(value)}, not a mapping")
        return {}

    def items(self, value: t.Any, where: str) -> list[Mapping[str, t.Any]]:
        """A list of mappings; null is an empty list. Each element of another kind is a reason."""
        if value is None:
            return []
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
            self.bad(f"{where} is {_kind(value)}, not a list")
            return []
        found = []
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                found.append(item)
            else:
                self.bad(f"{where}[{i}] is {_kind(item)}, not a mapping")
        return found

    def text(self, value: t.Any, where: str) -> str:
        """Text; a number where text is expected is shown as the number (NaN and Infinity as words)."""
        if value is None:
            return ""
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, (bool, int, float)):
            return clean_text(str(value).lower() if isinstance(value, bool) else str(value))
        self.bad(f"{where} is {_kind(value)}, not text")
        return ""


def _number(value: t.Any) -> float | None:
    """A finite, non-negative number, or None (missing, NaN, Infinity, negative, text, a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def _index(value: t.Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1_000_000 else None


def _gpu_health(gpu: Mapping[str, t.Any], binding: str, host_status: str) -> str:
    """ok, or what is wrong with this GPU as the facts show it."""
    problems = []
    if binding not in ("nvidia", ""):
        problems.append(f"bound to {binding}")
    for key, name in (("ecc", "ECC"), ("mig", "MIG")):
        mode = gpu.get(key)
        if isinstance(mode, Mapping) and mode.get("pending") is not None and mode.get("pending") != mode.get("current"):
            problems.append(f"{name} change pending")
    if problems:
        return ", ".join(problems)
    return "ok" if host_status in ("ok", "warn") else host_status


def _model(gpu: Mapping[str, t.Any], read: _Reader, where: str) -> str:
    name = read.text(gpu.get("name"), f"{where}.name")
    if name:
        return name
    device = read.text(gpu.get("pci_device_id"), f"{where}.pci_device_id")
    arch = read.text(gpu.get("architecture"), f"{where}.architecture")
    if device:
        return f"{arch} GPU ({device})" if arch else f"NVIDIA {device}"
    return "unknown"


def gpu_model(gpu: t.Any) -> str:
    """The GPU's name; without one (a GPU seen on the PCI bus only, no driver), its architecture and PCI device id."""
    return _model(gpu if isinstance(gpu, Mapping) else {}, _Reader(), "gpu")


def _first_line(value: t.Any) -> str:
    lines = str(value).splitlines()
    return clean_text(lines[0].strip() if lines else "", 300)


def _read_host(entry: t.Any, position: int, name: t.Any) -> dict[str, t.Any]:
    """One host as the report shows it: {host, status, problems, driver, cuda, reboot, facts_seen, gpus}.

    Nothing here raises: an entry of the wrong shape comes back as status ``malformed facts`` with the reasons.
    """
    read = _Reader()
    if not isinstance(entry, Mapping):
        read.bad(f"the host's entry is {_kind(entry)}, not a mapping")
        entry = {}
    host = read.text(entry.get("host"), "host") or (clean_text(str(name)) if name is not None else "")
    if not host:
        host = f"(entry {position + 1})"
        read.bad("the entry names no host")
    status = entry.get("status") or "unreachable"
    if status not in ENTRY_STATUSES:
        read.bad(f"status {read.text(status, 'status')!r} is not one of {', '.join(ENTRY_STATUSES)}")
        status = "unreachable"
    facts = read.mapping(entry.get("facts"), "facts")
    driver = read.mapping(facts.get("driver"), "facts.driver")
    gpus = read.items(facts.get("gpus"), "facts.gpus")
    reboot = facts.get("reboot_required")
    problems: list[str] = []
    if status == "ok":
        doctor = read.mapping(entry.get("doctor"), "doctor")
        checks = read.items(doctor.get("checks"), "doctor.checks")
        said = doctor.get("status")
        if "doctor" not in entry or entry.get("doctor") is None:
            status, problems = "unknown", ["no doctor result"]
        elif isinstance(said, str) and said in DOCTOR_STATUSES:
            status = said
        elif isinstance(said, (Mapping, list)):
            read.bad(f"doctor.status is {_kind(said)}, not text")
        else:
            # Fail closed: a status the report does not know is not "ok"; it is shown as unknown, with what it said.
            status = "unknown"
            problems = [f"doctor status {read.text(said, 'doctor.status')!r} is not one of {', '.join(DOCTOR_STATUSES)}"]
        for i, check in enumerate(checks):
            check_status = read.text(check.get("status"), f"doctor.checks[{i}].status")
            if check_status not in ("ok", ""):
                problems.append(f"{read.text(check.get('id'), f'doctor.checks[{i}].id') or '?'}: {check_status}")
    elif status == "failed":
        problems = [_first_line(entry["error"]) if entry.get("error") not in (None, "") else "failed, no error message"]
    elif entry.get("error") not in (None, ""):
        problems = [_first_line(entry["error"])]
    else:
        problems = ["host unreachable"]
    if reboot is not None and not isinstance(reboot, bool):
        # Fail closed: a reboot flag that is not true or false is unknown, not "no reboot needed".
        problems.append(f"facts.reboot_required is {_kind(reboot)}, not true or false")
    out = {
        "host": host, "status": status, "problems": problems,
        "driver": read.text(driver.get("version"), "facts.driver.version"),
        "cuda": read.text(driver.get("cuda_version"), "facts.driver.cuda_version"),
        "reboot": ("yes" if reboot is True else "no" if reboot is None or reboot is False else "unknown") if facts else "",
        "facts_seen": bool(facts),
        "gpus": [],
    }
    for i, gpu in enumerate(gpus):
        where = f"facts.gpus[{i}]"
        binding = read.text(gpu.get("bound_driver"), f"{where}.bound_driver")
        mig = gpu.get("mig")
        memory = _number(gpu.get("memory_total_mib"))
        index = _index(gpu.get("index"))
        out["gpus"].append({
            # The GPU's index; without a driver there is none, and the PCI address names it.
            "gpu": index if index is not None else read.text(gpu.get("pci_bus_id"), f"{where}.pci_bus_id"),
            "model": _model(gpu, read, where),
            "memory_gib": round(memory / 1024, 1) if memory is not None else "",
            "mig": read.text(mig.get("current") if isinstance(mig, Mapping) else mig, f"{where}.mig"),
            "binding": binding,
            "health": _gpu_health(gpu, binding, status),
        })
    if read.reasons:
        # Fail closed: a host whose data the report cannot read is a problem host with one row of its own, and the
        # reasons name what was wrong; nothing of it is counted as if it had been read.
        return {"host": host, "status": MALFORMED, "driver": "", "cuda": "", "reboot": "", "facts_seen": False, "gpus": [],
                "problems": [f"{MALFORMED}: " + clean_text("; ".join(read.reasons), 600)]}
    return out


def fleet_report(hosts: t.Iterable[t.Any], generated_at: str = "", names: t.Sequence[t.Any] | None = None) -> dict[str, t.Any]:
    """Rows (one per GPU; one per host without GPUs), problems first, and the counts the charts show.

    Every entry becomes at least one row, whatever its shape: one that cannot be read is listed as ``malformed facts`` with
    the reason. ``names`` (the inventory names, one per entry) name the hosts whose entries do not.
    """
    rows: list[dict[str, t.Any]] = []
    host_summaries: list[dict[str, t.Any]] = []
    models: Counter[str] = Counter()
    drivers: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    reboot: Counter[str] = Counter()
    for position, entry in enumerate(hosts):
        name = names[position] if names is not None and position < len(names) else None
        if name is not None and (entry is None or isinstance(entry, Mapping) and not entry):
            # A host that left nothing (playbooks/report.yml: unreachable before its entry was set).
            entry = {"host": name, "status": "unreachable"}
        host = _read_host(entry, position, name)
        status = host["status"]
        statuses[status] += 1
        if host["facts_seen"]:
            drivers[host["driver"] or "none"] += 1
            reboot[{"yes": "reboot needed", "no": "no reboot needed"}.get(host["reboot"], "unknown")] += 1
        else:
            reboot["unknown"] += 1
        base = {key: host[key] for key in ("host", "status", "driver", "cuda", "reboot")}
        base["problems"] = clean_text("; ".join(host["problems"]), 2000)
        host_summaries.append({**base, "gpus": len(host["gpus"])})
        if not host["gpus"]:
            health = "no GPU" if status in ("ok", "warn") else status
            rows.append({**base, "gpu": "", "model": "", "memory_gib": "", "mig": "", "binding": "", "health": health,
                         "kind": "host"})
            continue
        for gpu in host["gpus"]:
            models[gpu["model"]] += 1
            rows.append({**base, **gpu, "kind": "gpu"})
    rows.sort(key=lambda r: (_RANK[r["status"]], r["reboot"] != "yes", r["host"], r["gpu"] if isinstance(r["gpu"], int) else -1))
    host_summaries.sort(key=lambda h: (_RANK[h["status"]], h["host"]))
    return {
        "generated_at": clean_text(str(generated_at)),
        "columns": list(COLUMNS),
        "counts": {"hosts": len(host_summaries), "gpus": sum(models.values()),
                   "problem_hosts": sum(1 for h in host_summaries if h["status"] != "ok")},
        "charts": {"gpus_by_model": dict(models.most_common()), "driver_versions": dict(drivers.most_common()),
                   "doctor_status": {s: statuses[s] for s in HOST_STATUSES if statuses[s]},
                   "reboot": dict(reboot.most_common())},
        "hosts": host_summaries,
        "rows": rows,
    }


def _strict(value: t.Any) -> t.Any:
    """The report with every non-finite number as null: strict JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def report_json(report: dict[str, t.Any]) -> str:
    return json.dumps(_strict(report), indent=1, sort_keys=False, allow_nan=False) + "\n"


def csv_cell(value: t.Any) -> str:
    """One CSV cell a spreadsheet shows as text: one line, and a leading ``'`` where it would start a formula."""
    text = clean_text("" if value is None else str(value), 4000)
    if text[:1] in FORMULA_START or text[:1].isspace():
        return "'" + text
    return text


def report_csv(report: dict[str, t.Any]) -> str:
    out = io.StringIO()
    # Every field quoted (OWASP), so that a separator or quote inside a value cannot start a new cell.
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(COLUMNS)
    for row in report["rows"]:
        writer.writerow([csv_cell(row.get(c, "")) for c in COLUMNS])
    return out.getvalue()


_COLORS = {"unreachable": "#6b21a8", "failed": "#b91c1c", "malformed facts": "#9d174d", "fail": "#dc2626", "warn": "#d97706",
           "ok": "#16a34a",
           "reboot needed": "#d97706", "no reboot needed": "#16a34a", "unknown": "#6b7280"}


def _bar_chart(title: str, data: dict[str, int], chart_id: str, limit: int = 12) -> str:
    """A horizontal bar chart as inline SVG (the largest ``limit`` values, the rest summed as "other")."""
    items = list(data.items())
    if len(items) > limit:
        items = items[:limit - 1] + [("other", sum(count for _label, count in items[limit - 1:]))]
    top = max([count for _label, count in items] or [1]) or 1
    bar_h, label_w, width = 18, 170, 420
    height = max(1, len(items)) * (bar_h + 6) + 4
    parts = [f'<figure class="chart" id="{chart_id}"><figcaption>{html.escape(title)}</figcaption>'
             f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}">']
    if not items:
        parts.append('<text x="4" y="14" class="muted">no data</text>')
    for i, (label, value) in enumerate(items):
        y = 2 + i * (bar_h + 6)
        w = max(2, int((width - label_w - 50) * value / top))
        color = _COLORS.get(label, "#2563eb")
        short = label if len(label) <= 26 else label[:25] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end"><title>{html.escape(label)}</title>{html.escape(short)}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{w}" height="{bar_h}" fill="{color}" rx="2"/>'
                     f'<text x="{label_w + w + 4}" y="{y + 13}">{value}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#111827;background:#f9fafb}
h1{font-size:20px;margin:0 0 4px}.muted{color:#6b7280;fill:#6b7280}
.cards{display:flex;gap:12px;margin:12px 0}.card{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:22px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{background:#fff;border:1px solid #e5e7eb;border-radius:6px;margin:0;padding:8px}
.chart figcaption{font-weight:600;margin-bottom:4px}.chart text{font-size:12px;fill:#111827}
.controls{margin:12px 0;display:flex;gap:8px;align-items:center}input,select{font:inherit;padding:4px 6px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #e5e7eb;padding:3px 6px;text-align:left;white-space:nowrap}
th{position:sticky;top:0;background:#f3f4f6;cursor:pointer;user-select:none}th.asc:after{content:" ▲"}th.desc:after{content:" ▼"}
td.problems{white-space:normal;max-width:420px}
.s-unreachable{background:#f3e8ff}.s-failed,.s-fail,.s-malformed-facts{background:#fee2e2}.s-unknown{background:#f3f4f6}.s-warn{background:#fef3c7}
.badge{display:inline-block;padding:0 6px;border-radius:8px;color:#fff;font-size:12px}
"""

_JS = """
(function(){
var table=document.getElementById('fleet'),body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
var q=document.getElementById('filter'),st=document.getElementById('status'),shown=document.getElementById('shown');
function apply(){var text=q.value.toLowerCase(),s=st.value,n=0;
 for(var i=0;i<rows.length;i++){var r=rows[i];var ok=(!s||r.getAttribute('data-status')===s)&&(!text||r.textContent.toLowerCase().indexOf(text)>=0);
  r.style.display=ok?'':'none';if(ok)n++;}
 shown.textContent=n+' of '+rows.length+' rows';}
q.addEventListener('input',apply);st.addEventListener('change',apply);
var ths=table.tHead.rows[0].cells;
for(var c=0;c<ths.length;c++){(function(col){ths[col].addEventListener('click',function(){
 var dir=this.classList.contains('asc')?-1:1;for(var k=0;k<ths.length;k++)ths[k].classList.remove('asc','desc');
 this.classList.add(dir>0?'asc':'desc');
 rows.sort(function(a,b){var x=a.cells[col].getAttribute('data-v'),y=b.cells[col].getAttribute('data-v');
  var nx=parseFloat(x),ny=parseFloat(y);if(!isNaN(nx)&&!isNaN(ny))return (nx-ny)*dir;return x<y?-dir:x>y?dir:0;});
 var f=document.createDocumentFragment();for(var i=0;i<rows.length;i++)f.appendChild(rows[i]);body.appendChild(f);});})(c);}
apply();})();
"""


def report_html(report: dict[str, t.Any], title: str = "GPU fleet report") -> str:
    """One self-contained page: cards, four SVG charts, and the sortable, filterable table of hosts and GPUs."""
    esc = html.escape
    charts = report["charts"]
    counts = report["counts"]
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>{esc(title)}</title><meta name=\"viewport\" content=\"width=device-width\"><style>{_CSS}</style></head><body>",
           f"<h1>{esc(title)}</h1><div class=\"muted\">generated {esc(report.get('generated_at') or '')} by gpuhost.nvidia "
           f"playbooks/report.yml</div>",
           "<div class=\"cards\">"
           f"<div class=\"card\" id=\"n-hosts\"><b>{counts['hosts']}</b>hosts</div>"
           f"<div class=\"card\" id=\"n-gpus\"><b>{counts['gpus']}</b>GPUs</div>"
           f"<div class=\"card\" id=\"n-problems\"><b>{counts['problem_hosts']}</b>hosts with problems</div></div>",
           "<div class=\"charts\">",
           _bar_chart("GPUs by model", charts["gpus_by_model"], "chart-models"),
           _bar_chart("Driver versions (hosts)", charts["driver_versions"], "chart-drivers"),
           _bar_chart("Doctor status (hosts)", charts["doctor_status"], "chart-status"),
           _bar_chart("Reboot needed (hosts)", charts["reboot"], "chart-reboot"),
           "</div>",
           "<div class=\"controls\"><input id=\"filter\" type=\"search\" placeholder=\"Filter (host, model, driver…)\" size=\"32\">"
           "<select id=\"status\"><option value=\"\">every status</option>"
           + "".join(f"<option>{s}</option>" for s in HOST_STATUSES)
           + "</select><span id=\"shown\" class=\"muted\"></span></div>",
           "<table id=\"fleet\"><thead><tr>"
           + "".join(f"<th>{esc(c.replace('_', ' '))}</th>" for c in COLUMNS) + "</tr></thead><tbody>"]
    for row in report["rows"]:
        cells = []
        for col in COLUMNS:
            value = row.get(col, "")
            text = esc(str(value))
            if col == "status":
                text = f"<span class=\"badge\" style=\"background:{_COLORS.get(str(value), '#6b7280')}\">{text}</span>"
            cls = " class=\"problems\"" if col == "problems" else ""
            cells.append(f"<td{cls} data-v=\"{esc(str(value))}\">{text}</td>")
        out.append(f"<tr class=\"s-{esc(row['status'].replace(' ', '-'))}\" data-kind=\"{row['kind']}\" data-status=\"{esc(row['status'])}\" "
                   f"data-host=\"{esc(row['host'])}\">{''.join(cells)}</tr>")
    out.append(f"</tbody></table><script>{_JS}</script></body></html>\n")
    return "".join(out)


# A host name label (RFC 1123 section 2.1): letters, digits and hyphens, 1 to 63 characters, no hyphen at either end.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_DIGITS = re.compile(r"[0-9]+")
_SCRAPE_HOST_FIX = "set gpu_exporter_scrape_host (or ansible_host) to the host name or IP address Prometheus scrapes"
_PORT_FIX = "set gpu_exporter_port to a port in 1-65535"


def _shown(value: t.Any) -> str:
    """A value as an error message shows it: quoted, escaped, cut."""
    text = repr(value) if isinstance(value, str) else f"{value!r} ({_kind(value)})"
    return text if len(text) <= 80 else text[:77] + "..."


def scrape_host(address: t.Any) -> str:
    """The host part of a Prometheus target: a host name, an IPv4 address or an IPv6 address in brackets.

    Raises ValueError naming what is wrong; Prometheus itself keeps a target it cannot scrape and only fails the scrape.
    """
    if not isinstance(address, str) or not address:
        raise ValueError(f"address {_shown(address)} is not a host name or IP address")
    inner = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    if ":" in inner:
        try:
            ip6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise ValueError(f"address {_shown(address)} is neither an IPv6 address nor a host name (give the port in "
                             "gpu_exporter_port, not in the address)") from None
        if ip6.scope_id is not None:
            raise ValueError(f"address {_shown(address)} has an IPv6 zone; give a routable address")
        if ip6.is_unspecified or ip6.is_multicast:
            raise ValueError(f"address {_shown(address)} is the unspecified or a multicast address, which cannot be scraped")
        return f"[{inner}]"
    if inner != address:
        raise ValueError(f"address {_shown(address)}: only an IPv6 address goes in brackets")
    name = address[:-1] if address.endswith(".") else address
    labels = name.split(".")
    if all(_DIGITS.fullmatch(label) for label in labels):
        try:
            ip4 = ipaddress.IPv4Address(address)
        except ValueError:
            raise ValueError(f"address {_shown(address)} is not a valid IPv4 address") from None
        if ip4.is_unspecified or ip4.is_multicast or ip4 == ipaddress.IPv4Address("255.255.255.255"):
            raise ValueError(f"address {_shown(address)} is the unspecified, broadcast or a multicast address, which "
                             "cannot be scraped")
        return address
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"address {_shown(address)} is not a valid host name (letters, digits, hyphens and dots, "
                         "labels of 1-63 characters; an internationalised name in its xn-- form)")
    if _DIGITS.fullmatch(labels[-1]):
        raise ValueError(f"address {_shown(address)} is not a valid host name: its last label is all digits")
    return address


def scrape_port(port: t.Any) -> int:
    """A TCP port in 1-65535, given as a whole number or its decimal digits."""
    number = int(port) if isinstance(port, str) and _DIGITS.fullmatch(port) and len(port) <= 5 else port
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise ValueError(f"port {_shown(port)} is not a port in 1-65535")
    return number


def file_sd_errors(targets: t.Any) -> list[str]:
    """Every reason the targets cannot become file_sd entries, each naming the host; empty when all of them can."""
    if isinstance(targets, (str, bytes, Mapping)) or not isinstance(targets, Sequence):
        return [f"the targets are {_kind(targets)}, not a list of {{host, address, port, kind, facts}}"]
    errors = []
    for position, target in enumerate(targets):
        if not isinstance(target, Mapping):
            errors.append(f"target {position + 1} is {_kind(target)}, not {{host, address, port, kind, facts}}")
            continue
        host = target.get("host")
        if not isinstance(host, str) or not host.strip():
            errors.append(f"target {position + 1} ({_shown(target.get('address'))}) names no inventory host "
                          f"(host is {_shown(host)})")
            continue
        for check, value, fix in ((scrape_host, target.get("address"), _SCRAPE_HOST_FIX), (scrape_port, target.get("port"), _PORT_FIX)):
            try:
                check(value)
            except ValueError as exc:
                errors.append(f"host {_shown(host)}: {exc}; {fix}")
    return errors


def file_sd(targets: t.Sequence[Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Prometheus file_sd entries: one per exporter target, labelled from the host's GPU facts.

    Each target is ``{host, address, port, kind, facts}``. Labels: ``gpuhost_host`` (the inventory name),
    ``gpuhost_exporter``, ``gpuhost_gpu_model`` (the models, comma-separated), ``gpuhost_gpu_count`` and
    ``gpuhost_driver_version``. Prometheus keeps a target label over an exporter's label of the same name (honor_labels
    is false by default) and renames the exporter's to ``exported_<name>``: nvidia_gpu_exporter's own
    ``driver_version`` would have become ``exported_driver_version``. The ``gpuhost_`` prefix is on no label either
    exporter publishes, so every exporter label reaches Prometheus under its own name. Raises ValueError listing every
    target that is not ``host:port`` with a valid host and a port in 1-65535 (:func:`file_sd_errors`), before any
    entry is built.
    """
    errors = file_sd_errors(targets)
    if errors:
        raise ValueError("; ".join(errors))
    entries = []
    for target in sorted(targets, key=lambda x: str(x.get("host"))):
        facts = target.get("facts") if isinstance(target.get("facts"), Mapping) else {}
        gpus = [g for g in facts.get("gpus") or [] if isinstance(g, Mapping)] if isinstance(facts.get("gpus"), list) else []
        driver = facts.get("driver") if isinstance(facts.get("driver"), Mapping) else {}
        read = _Reader()
        entries.append({
            "targets": [f"{scrape_host(target['address'])}:{scrape_port(target['port'])}"],
            "labels": {
                "gpuhost_host": str(target.get("host")),
                "gpuhost_exporter": read.text(target.get("kind"), "kind"),
                "gpuhost_gpu_model": ",".join(sorted({gpu_model(g) for g in gpus})),
                "gpuhost_gpu_count": str(len(gpus)),
                "gpuhost_driver_version": read.text(driver.get("version"), "driver.version"),
            },
        })
    return entries
