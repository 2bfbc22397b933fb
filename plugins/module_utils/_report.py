# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report and the exporters' Prometheus file_sd: pure functions of the hosts' facts and doctor results.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

:func:`fleet_report` turns one entry per inventory host (``{host, status, facts, doctor, error}``, where status is
``ok``, ``failed`` or ``unreachable``) into rows, one per GPU (a host without GPUs, or one that could not be read, gets
one row of its own: nobody is dropped), problems first. :func:`report_csv` and :func:`report_html` render it; the page
is self-contained (inline CSS, JavaScript and SVG charts, no external asset). :func:`file_sd` builds Prometheus'
file-based service discovery from the exporter targets.
"""

from __future__ import annotations

import csv
import html
import io
import json
import typing as t
from collections import Counter

HOST_STATUSES = ("unreachable", "failed", "fail", "warn", "ok")
# Lower is worse: the order rows and hosts are shown in.
_RANK = {status: rank for rank, status in enumerate(HOST_STATUSES)}
COLUMNS = ("host", "status", "gpu", "model", "memory_gib", "driver", "cuda", "mig", "binding", "health", "reboot", "problems")


def _gpu_health(gpu: dict[str, t.Any], host_status: str) -> str:
    """ok, or what is wrong with this GPU as the facts show it."""
    problems = []
    if gpu.get("bound_driver") not in ("nvidia", None):
        problems.append(f"bound to {gpu.get('bound_driver')}")
    ecc = gpu.get("ecc") or {}
    if isinstance(ecc, dict) and ecc.get("pending") not in (None, ecc.get("current")):
        problems.append("ECC change pending")
    mig = gpu.get("mig") or {}
    if isinstance(mig, dict) and mig.get("pending") not in (None, mig.get("current")):
        problems.append("MIG change pending")
    if problems:
        return ", ".join(problems)
    return "ok" if host_status in ("ok", "warn") else host_status


def _host_row_base(entry: dict[str, t.Any]) -> tuple[dict[str, t.Any], str, list[str]]:
    facts = entry.get("facts") or {}
    doctor = entry.get("doctor") or {}
    status = entry.get("status") or "unreachable"
    problems: list[str] = []
    if status == "ok":
        status = doctor.get("status") or "ok"
        problems = [f"{c.get('id')}: {c.get('status')}" for c in doctor.get("checks") or [] if c.get("status") not in ("ok", None)]
    elif entry.get("error"):
        problems = [str(entry["error"]).splitlines()[0][:300]]
    else:
        problems = ["host unreachable"]
    driver = facts.get("driver") or {}
    reboot = facts.get("reboot_required")
    base = {
        "host": str(entry.get("host")),
        "status": status,
        "driver": driver.get("version") or "",
        "cuda": driver.get("cuda_version") or "",
        "reboot": "yes" if reboot else ("no" if facts else ""),
        "problems": "; ".join(problems),
    }
    return base, status, problems


def gpu_model(gpu: dict[str, t.Any]) -> str:
    """The GPU's name; without one (a GPU seen on the PCI bus only, no driver), its architecture and PCI device id."""
    if gpu.get("name"):
        return str(gpu["name"])
    device = gpu.get("pci_device_id")
    arch = gpu.get("architecture")
    if device:
        return f"{arch} GPU ({device})" if arch else f"NVIDIA {device}"
    return "unknown"


def fleet_report(hosts: t.Iterable[dict[str, t.Any]], generated_at: str = "") -> dict[str, t.Any]:
    """Rows (one per GPU; one per host without GPUs), problems first, and the counts the charts show."""
    rows: list[dict[str, t.Any]] = []
    host_summaries: list[dict[str, t.Any]] = []
    models: Counter[str] = Counter()
    drivers: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    reboot: Counter[str] = Counter()
    for entry in hosts:
        base, status, _problems = _host_row_base(entry)
        facts = entry.get("facts") or {}
        gpus = facts.get("gpus") or []
        statuses[status] += 1
        if facts:
            drivers[base["driver"] or "none"] += 1
            reboot["reboot needed" if base["reboot"] == "yes" else "no reboot needed"] += 1
        else:
            reboot["unknown"] += 1
        host_summaries.append({"host": base["host"], "status": status, "gpus": len(gpus), "driver": base["driver"],
                               "reboot": base["reboot"], "problems": base["problems"]})
        if not gpus:
            rows.append({**base, "gpu": "", "model": "", "memory_gib": "", "mig": "", "binding": "",
                         "health": "no GPU" if status in ("ok", "warn") else status, "kind": "host"})
            continue
        for gpu in gpus:
            model = gpu_model(gpu)
            models[model] += 1
            mig = gpu.get("mig") or {}
            memory = gpu.get("memory_total_mib")
            # The GPU's index; without a driver there is none, and the PCI address names it.
            index = gpu.get("index")
            rows.append({**base, "gpu": index if index is not None else (gpu.get("pci_bus_id") or ""), "model": model,
                         "memory_gib": round(memory / 1024, 1) if isinstance(memory, (int, float)) else "",
                         "mig": (mig.get("current") or "") if isinstance(mig, dict) else str(mig),
                         "binding": gpu.get("bound_driver") or "", "health": _gpu_health(gpu, status), "kind": "gpu"})
    rows.sort(key=lambda r: (_RANK.get(r["status"], 0), r["reboot"] != "yes", r["host"],
                             r["gpu"] if isinstance(r["gpu"], int) else -1))
    host_summaries.sort(key=lambda h: (_RANK.get(h["status"], 0), h["host"]))
    return {
        "generated_at": generated_at,
        "columns": list(COLUMNS),
        "counts": {"hosts": len(host_summaries), "gpus": sum(models.values()),
                   "problem_hosts": sum(1 for h in host_summaries if h["status"] != "ok")},
        "charts": {"gpus_by_model": dict(models.most_common()), "driver_versions": dict(drivers.most_common()),
                   "doctor_status": {s: statuses[s] for s in HOST_STATUSES if statuses[s]},
                   "reboot": dict(reboot.most_common())},
        "hosts": host_summaries,
        "rows": rows,
    }


def report_json(report: dict[str, t.Any]) -> str:
    return json.dumps(report, indent=1, sort_keys=False) + "\n"


def report_csv(report: dict[str, t.Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in report["rows"]:
        writer.writerow([row.get(c, "") for c in COLUMNS])
    return out.getvalue()


_COLORS = {"unreachable": "#6b21a8", "failed": "#b91c1c", "fail": "#dc2626", "warn": "#d97706", "ok": "#16a34a",
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
.s-unreachable{background:#f3e8ff}.s-failed,.s-fail{background:#fee2e2}.s-warn{background:#fef3c7}
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
        out.append(f"<tr class=\"s-{esc(row['status'])}\" data-kind=\"{row['kind']}\" data-status=\"{esc(row['status'])}\" "
                   f"data-host=\"{esc(row['host'])}\">{''.join(cells)}</tr>")
    out.append(f"</tbody></table><script>{_JS}</script></body></html>\n")
    return "".join(out)


def file_sd(targets: t.Iterable[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Prometheus file_sd entries: one per exporter target, labelled from the host's GPU facts.

    Each target is ``{host, address, port, kind, facts}``. Labels: ``gpuhost_host`` (the inventory name),
    ``gpuhost_exporter``, ``gpuhost_gpu_model`` (the models, comma-separated), ``gpuhost_gpu_count`` and
    ``gpuhost_driver_version``. Prometheus keeps a target label over an exporter's label of the same name (honor_labels
    is false by default) and renames the exporter's to ``exported_<name>``: nvidia_gpu_exporter's own
    ``driver_version`` would have become ``exported_driver_version``. The ``gpuhost_`` prefix is on no label either
    exporter publishes, so every exporter label reaches Prometheus under its own name.
    """
    entries = []
    for target in sorted(targets, key=lambda x: str(x.get("host"))):
        facts = target.get("facts") or {}
        gpus = facts.get("gpus") or []
        address = str(target["address"])
        if ":" in address and not address.startswith("["):
            address = f"[{address}]"
        entries.append({
            "targets": [f"{address}:{int(target['port'])}"],
            "labels": {
                "gpuhost_host": str(target.get("host")),
                "gpuhost_exporter": str(target.get("kind") or ""),
                "gpuhost_gpu_model": ",".join(sorted({gpu_model(g) for g in gpus})),
                "gpuhost_gpu_count": str(len(gpus)),
                "gpuhost_driver_version": str((facts.get("driver") or {}).get("version") or ""),
            },
        })
    return entries
