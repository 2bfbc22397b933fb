# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The converged fast path of the roles: what a full run left on the host, and what has drifted since.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

A role that completes a full run writes a *record* (``build_record``): the digest of everything the role plans
from (``inputs_digest``: its name, its code, its variables as resolved, the facts it reads), the sha256 of each file
it manages, the installed version of each package it manages, the enablement and active state of each unit it
manages, and the variables it reports to the rest of the play (``outputs``). The next run *probes* the host
(``compare``): the same inputs and the same observed state mean the full run would change nothing, so the role can
end there and hand back the recorded outputs. Anything else is drift, reported as sentences.

Nothing here touches the host: the module gathers the observed state with one package-manager call and one
``systemctl show`` call (``package_command``, ``unit_command``) and hands the outputs to the parsers below.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing as t

RECORD_FORMAT = 1
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
UNCONFIRMED = "the last full run changed what the role manages: the next full run confirms that it changes nothing"
REBOOTED = ("the host has booted since the full run that changed what the role manages (what that run reported, its reboot"
            " reasons included, may no longer hold): this full run reports afresh")
UNIT_PROPERTIES = ("LoadState", "UnitFileState", "ActiveState")
PACKAGE_MANAGERS = ("apt", "dnf", "yum", "dnf5", "pacman")


def canonical_json(data: t.Any) -> str:
    """JSON with sorted keys and no whitespace: the same data always gives the same text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def inputs_digest(inputs: t.Any) -> str:
    """sha256 (hex) over the canonical JSON of ``inputs``."""
    return hashlib.sha256(canonical_json(inputs).encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes | None) -> str | None:
    """The hex sha256 of file content, None for a missing file."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def package_name(spec: str) -> str:
    """The package name of an install request: C(nvidia-smi=535.*) and C(nvidia-smi>=535) are C(nvidia-smi)."""
    return re.split(r"[=<>]", spec.strip(), maxsplit=1)[0].strip()


def package_command(manager: str, names: list[str]) -> list[str]:
    """One read-only query for the installed versions of ``names`` with ``manager`` (an Ansible ``pkg_mgr``)."""
    if manager == "apt":
        return ["dpkg-query", "-W", "-f=${Package}\\t${db:Status-Abbrev}\\t${Version}\\n", "--"] + names
    if manager in ("dnf", "yum", "dnf5"):
        return ["rpm", "-q", "--qf", "%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n", "--"] + names
    if manager == "pacman":
        return ["pacman", "-Q", "--"] + names
    raise ValueError("package manager %r is not one of %s" % (manager, ", ".join(PACKAGE_MANAGERS)))


def parse_packages(manager: str, names: list[str], output: str) -> dict[str, str | None]:
    """Installed version by name (None when not installed) from ``package_command``'s standard output.

    dpkg-query lists removed packages whose configuration files remain (status ``rc``): those count as not
    installed. Names the query did not print (rpm says "package X is not installed" on standard output, the others
    write to standard error) are not installed.
    """
    found: dict[str, str] = {}
    for line in output.splitlines():
        if manager == "apt":
            parts = line.split("\t")
            if len(parts) == 3 and parts[1].startswith("ii"):
                found[parts[0]] = parts[2]
        elif manager == "pacman":
            parts = line.split()
            if len(parts) == 2:
                found[parts[0]] = parts[1]
        else:
            parts = line.split("\t")
            if len(parts) == 2:
                # Several installed versions of one name (kernel packages): keep them all, sorted.
                found[parts[0]] = ",".join(sorted(set(found[parts[0]].split(",") + [parts[1]]))) if parts[0] in found else parts[1]
    return {name: found.get(name) for name in names}


def unit_command(units: list[str]) -> list[str]:
    """One read-only ``systemctl show`` of the load, enablement and active state of ``units``."""
    return ["systemctl", "show", "--property=" + ",".join(UNIT_PROPERTIES), "--"] + units


def parse_units(units: list[str], output: str) -> dict[str, dict[str, str]]:
    """State by unit from ``unit_command``'s output: systemctl prints one block per unit, in order, blank-line separated."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in output.splitlines() + [""]:
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key.strip()] = value.strip()
    states = {}
    for index, unit in enumerate(units):
        block = blocks[index] if index < len(blocks) else {}
        states[unit] = {
            "load": block.get("LoadState", "not-found") or "not-found",
            "enabled": block.get("UnitFileState", ""),
            "active": block.get("ActiveState", "inactive") or "inactive",
        }
    return states


def build_record(digest: str, observed: dict[str, t.Any], outputs: dict[str, t.Any] | None = None, confirmed: bool = False,
                 changed_run: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """The record a full run leaves: the inputs digest, the observed files, packages and units, and the outputs.

    ``confirmed``: the full run found the host as the previous record said, so it changed nothing the role manages, and
    its outputs are what every later full run reports. ``changed_run`` (``{"boot_id", "at"}``): the full run changed
    the host; the record is what the run left, observed after it (at the end of site.yml: after every role), and its
    outputs describe that run's changes ("installed", a reboot because packages were installed). The fast path trusts
    it in the boot that run changed the host in, handing those outputs back as that run's (``fast_path_outputs``).
    """
    record = {
        "format": RECORD_FORMAT,
        "confirmed": bool(confirmed),
        "inputs_digest": digest,
        "files": dict(observed.get("files", {})),
        "packages": dict(observed.get("packages", {})),
        "units": dict(observed.get("units", {})),
        # A variable the run left undefined is passed as null: it is left out, so the fast path leaves it undefined too.
        "outputs": {key: value for key, value in (outputs or {}).items() if value is not None},
    }
    if changed_run is not None:
        record["changed_run"] = {"boot_id": changed_run.get("boot_id"), "at": changed_run.get("at")}
    return record


def changed_run_problem(changed_run: t.Any) -> str | None:
    """Why a record's ``changed_run`` is not usable (None: it is, or there is none)."""
    if changed_run is None:
        return None
    if not isinstance(changed_run, dict) or not isinstance(changed_run.get("at"), str) or \
            not (changed_run.get("boot_id") is None or isinstance(changed_run.get("boot_id"), str)):
        return "the record's changed_run is not {boot_id, at}"
    return None


def parse_record(text: str) -> tuple[dict[str, t.Any] | None, str | None]:
    """The record from its file text, or None and why it cannot be used."""
    try:
        record = json.loads(text)
    except ValueError as exc:
        return None, "the record is not valid JSON (%s)" % exc
    if not isinstance(record, dict):
        return None, "the record is not a JSON object"
    if record.get("format") != RECORD_FORMAT:
        return None, "the record has format %r, this collection writes format %d" % (record.get("format"), RECORD_FORMAT)
    for key in ("files", "packages", "units", "outputs"):
        if not isinstance(record.get(key), dict):
            return None, "the record has no %s mapping" % key
    if not isinstance(record.get("inputs_digest"), str):
        return None, "the record has no inputs digest"
    if not isinstance(record.get("confirmed"), bool):
        return None, "the record does not say whether a full run confirmed it"
    problem = changed_run_problem(record.get("changed_run"))
    if problem:
        return None, problem
    return record, None


def wanted(record: dict[str, t.Any]) -> dict[str, list[str]]:
    """What a probe must observe: the files, packages and units the record lists."""
    return {key: sorted(record.get(key, {})) for key in ("files", "packages", "units")}


def _short(digest: str | None) -> str:
    return "absent" if digest is None else "sha256 %s" % digest[:12]


def _file_drift(path: str, recorded: str | None, current: str | None) -> str | None:
    if recorded == current:
        return None
    if current is None:
        return "file %s is missing (recorded %s)" % (path, _short(recorded))
    if recorded is None:
        return "file %s exists now; the record says it was absent" % path
    return "file %s changed (%s, recorded %s)" % (path, _short(current), _short(recorded))


def _package_drift(name: str, recorded: str | None, current: str | None) -> str | None:
    if recorded == current:
        return None
    if current is None:
        return "package %s is not installed (recorded version %s)" % (name, recorded)
    if recorded is None:
        return "package %s is installed (version %s); the record says it was not" % (name, current)
    return "package %s is version %s, recorded %s" % (name, current, recorded)


def _unit_drift(name: str, recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    reasons = []
    if recorded.get("load") != current.get("load"):
        return ["unit %s is %s, recorded %s" % (name, current.get("load"), recorded.get("load"))]
    if recorded.get("enabled") != current.get("enabled"):
        unknown = "without a unit file state"
        reasons.append("unit %s is %s, recorded %s" % (name, current.get("enabled") or unknown, recorded.get("enabled") or unknown))
    # A unit that was running must still run; one that could not start (no GPU, no driver loaded) is not expected to.
    if recorded.get("active") == "active" and current.get("active") != "active":
        reasons.append("unit %s is %s, recorded active" % (name, current.get("active")))
    return reasons


def item_drift(record: dict[str, t.Any], observed: dict[str, t.Any]) -> list[str]:
    """Each file, package and unit ``record`` lists that ``observed`` does not find as recorded, as sentences."""
    drift: list[str] = []
    for path in sorted(record["files"]):
        reason = _file_drift(path, record["files"][path], observed.get("files", {}).get(path))
        if reason:
            drift.append(reason)
    for name in sorted(record["packages"]):
        reason = _package_drift(name, record["packages"][name], observed.get("packages", {}).get(name))
        if reason:
            drift.append(reason)
    for name in sorted(record["units"]):
        current = observed.get("units", {}).get(name) or {"load": "not-found", "enabled": "", "active": "inactive"}
        drift.extend(_unit_drift(name, record["units"][name] or {}, current))
    return drift


def trusted_boot(record: dict[str, t.Any], boot_id: str | None) -> str | None:
    """Why the fast path cannot hand back ``record``'s outputs in the boot ``boot_id`` (None: it can).

    A confirmed record holds in any boot (a reboot that moves the loaded driver changes the GPU facts, hence the inputs
    digest). A record of a run that changed the host holds in the boot that run changed it in: its reboot reasons
    ("the new module loads at the next boot") are true until the host boots. A boot that cannot be read is not the same.
    """
    if record.get("confirmed"):
        return None
    changed_run = record.get("changed_run")
    if not isinstance(changed_run, dict):
        return UNCONFIRMED  # written before records said which run changed the host
    if not boot_id or changed_run.get("boot_id") != boot_id:
        return REBOOTED
    return None


def fast_path_outputs(record: dict[str, t.Any]) -> dict[str, t.Any]:
    """The outputs a converged probe hands back: a confirmed record's as they are; a changing run's with each line of
    its ``<role>_report`` (the collection's report variables: lists of "<role>: ..." lines) marked as that run's, so a
    re-run's summary does not claim the changes ("installed", "written") as its own. The other variables (reboot
    reasons, the driver userland, CDI device names) are states, true in the boot the run changed the host in."""
    outputs = dict(record.get("outputs") or {})
    changed_run = record.get("changed_run")
    if record.get("confirmed") or not isinstance(changed_run, dict):
        return outputs
    mark = "[reported by the full run of %s, which changed the host]" % changed_run.get("at")
    for key, lines in outputs.items():
        if key.endswith("_report") and isinstance(lines, list):
            prefix = key[:-len("_report")] + ": "
            outputs[key] = [prefix + mark + " " + line[len(prefix):] if isinstance(line, str) and line.startswith(prefix)
                            else ("%s %s" % (mark, line) if isinstance(line, str) else line) for line in lines]
    return outputs


def verdict(record: dict[str, t.Any] | None, digest: str, items: list[str], problem: str | None = None,
            boot_id: str | None = None) -> dict[str, t.Any]:
    """The probe's answer from the record (only ``confirmed``, ``changed_run`` and ``inputs_digest`` are read), its item
    drift, and the host's boot (``boot_id``)."""
    if record is None:
        return {"converged": False, "drift": ["no usable record (%s): the next run is a full run" % (problem or "none written yet")]}
    drift: list[str] = []
    untrusted = trusted_boot(record, boot_id)
    if untrusted:
        drift.append(untrusted)
    if record["inputs_digest"] != digest:
        drift.append("the inputs changed since the record (the role's variables, its code, the distribution, the kernel or the GPU facts)")
    drift.extend(items)
    return {"converged": not drift, "drift": drift}


def compare(record: dict[str, t.Any] | None, digest: str, observed: dict[str, t.Any], problem: str | None = None) -> dict[str, t.Any]:
    """Whether the host is as the record says, and every drift found, as sentences.

    ``observed`` holds ``files`` (path: sha256 or None), ``packages`` (name: version or None) and ``units`` (name:
    {load, enabled, active}) for at least the items the record lists, and ``boot_id`` (the host's boot). ``problem``
    says why there is no record.
    """
    return verdict(record, digest, item_drift(record, observed) if record is not None else [], problem, observed.get("boot_id"))


def record_items(files: list[str], packages: list[str], units: list[str]) -> dict[str, list[str]]:
    """What a record lists, from the record call's options: each file and unit once, each package request by its name."""
    return {"files": sorted(set(files)), "packages": sorted(set(package_name(p) for p in packages) - {""}), "units": sorted(set(units))}


def observed_items(observed: dict[str, t.Any], items: dict[str, list[str]]) -> dict[str, t.Any]:
    """The part of ``observed`` (one observation of several records' items) that one record lists."""
    return {
        "files": {path: observed.get("files", {}).get(path) for path in items["files"]},
        "packages": {name: observed.get("packages", {}).get(name) for name in items["packages"]},
        "units": {name: observed.get("units", {}).get(name) for name in items["units"]},
    }


def record_verdict(old: dict[str, t.Any] | None, problem: str | None, new: dict[str, t.Any], observed: dict[str, t.Any],
                   pending: bool = False, check_mode: bool = False) -> dict[str, t.Any]:
    """Whether writing ``new`` (the record of what the full run left) counts as a change, and why.

    It counts when there was no usable record (``old`` None, ``problem`` says why) or the host is not as the old record
    says (files, packages, units, or the set of them). A new inputs digest or new outputs alone rewrite the record
    without counting: a changed variable or a collection upgrade that changes nothing on the host is a run with
    nothing changed. In check mode, ``pending`` (an earlier task would change what the record lists, and only
    pretended to) counts as the change the real run's record makes.
    """
    confirmed = dict(old, confirmed=True) if old else None
    result = compare(confirmed, old["inputs_digest"] if old else new["inputs_digest"], observed, problem)
    if old is not None and wanted(old) != wanted(new):
        result = {"converged": False, "drift": result["drift"] + ["the managed files, packages or units changed"]}
    if check_mode and pending and result["converged"]:
        # What check mode only pretended to change is not on the host yet: the real run's record will differ.
        result = {"converged": False, "drift": ["check mode: earlier tasks of this run would change what the record lists"]}
    return result


# One observation for every role (state=observe, once per host at the start of playbooks/site.yml): the module reads
# every record and observes the union of what they list in one call; the probes of the roles that follow answer from
# it on the controller while nothing can have changed since.

OBSERVATION_VAR = "gpuhost_converged_observation"
"""The variable site.yml registers the observation as: registered variables live for one run, never in a fact cache."""

OBSERVATION_FACT = "gpuhost_converged_observed"
"""The host fact that says what of the observation still holds (``observation_status``), changed by each probe/record."""


def observation_wanted(records: t.Mapping[str, dict[str, t.Any] | None]) -> dict[str, list[str]]:
    """The union of what the usable records list: each file, package and unit once."""
    union: dict[str, set[str]] = {"files": set(), "packages": set(), "units": set()}
    for record in records.values():
        if record is not None:
            for key, names in wanted(record).items():
                union[key].update(names)
    return {key: sorted(names) for key, names in union.items()}


def observation_entries(loaded: t.Mapping[str, tuple[dict[str, t.Any] | None, str | None]], observed: dict[str, t.Any],
                        unobserved: t.Mapping[str, str] | None = None) -> dict[str, dict[str, t.Any]]:
    """Per record path, what a probe of it needs besides the inputs digest.

    ``loaded``: path -> (record, why it is unusable). ``observed``: as for ``compare``, for ``observation_wanted``.
    ``unobserved``: item -> why it could not be observed (``file:<path>``, ``units``); a record that lists such an
    item is left to a live probe, which fails or answers as it always did. An entry holds ``problem`` (no usable
    record), ``live`` (ask the host), or the record's ``confirmed``, ``inputs_digest`` and ``outputs`` with the item
    ``drift``.
    """
    unobserved = unobserved or {}
    entries: dict[str, dict[str, t.Any]] = {}
    for path, (record, problem) in sorted(loaded.items()):
        if record is None:
            entries[path] = {"problem": problem or "none written yet"}
            continue
        blocked = ["file:" + name for name in sorted(record["files"])] + (["units"] if record["units"] else [])
        reasons = [unobserved[item] for item in blocked if item in unobserved]
        if reasons:
            entries[path] = {"live": reasons[0]}
            continue
        entries[path] = {"confirmed": record["confirmed"], "inputs_digest": record["inputs_digest"], "outputs": record["outputs"],
                         "drift": item_drift(record, observed)}
        if "changed_run" in record:
            entries[path]["changed_run"] = record["changed_run"]
    return entries


FULL_RUN_VAR = "gpuhost_converged_full_run"
"""The variable that asks every role's probe for the full path (the roles still record; ``gpuhost_fast_path: false``
also removes the records)."""

FULL_RUN = ("a full run was asked for (gpuhost_converged_full_run): the role takes its full path, which must change "
            "nothing on a converged host, and records what it left")


def full_run_answer(path: str) -> dict[str, t.Any]:
    """A role's probe in a run with ``gpuhost_converged_full_run``: not converged, answered without reading the host."""
    return {"converged": False, "drift": [FULL_RUN], "changed": False, "path": path, "outputs": {}}


def observation_status(identity: str, playbook: str) -> dict[str, t.Any]:
    """The fact a new observation starts with: every entry holds (``trusted``), none used yet."""
    return {"id": identity, "playbook": playbook, "trusted": True, "used": []}


def _status_for(observation: t.Any, status: t.Any) -> dict[str, t.Any] | None:
    """``status`` when it belongs to ``observation`` (same id): the fact of another run or none is not this run's."""
    if not isinstance(observation, dict) or not isinstance(status, dict) or not observation.get("id"):
        return None
    if status.get("id") != observation["id"] or not isinstance(status.get("used"), list):
        return None
    return status


def local_answer(observation: t.Any, status: t.Any, path: str, digest: str, playbook: str) -> dict[str, t.Any] | None:
    """The probe's result from the observation, exactly as the module would give it on the host; None: ask the host.

    The observation answers only in the playbook that took it, for a record in the directory it read, once per record
    and run (``used``). A role without a usable record at observation time still has none until that role records
    (which marks it used): no other role writes it. Every other entry holds only while ``trusted``: no role has taken
    its full path since (which may move what another record tracks, a package shared or upgraded as a dependency).
    """
    status = _status_for(observation, status)
    if status is None or not playbook or status.get("playbook") != playbook or path in status["used"]:
        return None
    if observation.get("path") != path.rpartition("/")[0] or not isinstance(observation.get("records"), dict):
        return None
    entry = observation["records"].get(path)
    if entry is None:
        answer = verdict(None, digest, [], "no record at %s" % path)
    elif "problem" in entry:
        answer = verdict(None, digest, [], entry["problem"])
    elif "live" in entry or not status.get("trusted"):
        return None
    else:
        answer = verdict(entry, digest, list(entry["drift"]), boot_id=observation.get("boot_id"))
    outputs = fast_path_outputs(entry) if entry is not None and answer["converged"] else {}
    return dict(answer, changed=False, path=path, outputs=outputs)


def may_hold(observation: t.Any, path: str) -> bool:
    """Whether ``observation`` has a record at ``path`` that a probe could find converged: usable, observed, no drift
    (whether its inputs digest is the role's, and whether the observation still holds, ``local_answer`` decides)."""
    if not isinstance(observation, dict) or not isinstance(observation.get("records"), dict):
        return False
    entry = observation["records"].get(path)
    return isinstance(entry, dict) and "problem" not in entry and "live" not in entry and not entry.get("drift")


def status_after(observation: t.Any, status: t.Any, path: str, state: str, converged: bool) -> dict[str, t.Any] | None:
    """The fact after a probe, record or removal of ``path``; None when it does not change (or is not this run's).

    The record is used (its next probe asks the host), and anything but a converged probe means a full path ran or
    runs now: from then on only the entries without a usable record answer from the observation.
    """
    status = _status_for(observation, status)
    if status is None:
        return None
    new = dict(status, used=list(status["used"]) + ([path] if path not in status["used"] else []))
    if state != "probe" or not converged:
        new["trusted"] = False
    return None if new == status else new


# Deferred records (``defer: true``, which playbooks/site.yml turns on with ``gpuhost_converged_defer``): the action
# plugin keeps each role's record call, complete, in a host fact instead of making it, and one ``state: flush`` call
# at the end of the run writes them all with one observation of what they list.

DEFERRED_FACT = "gpuhost_converged_deferred"
"""The host fact of the deferred record calls: ``{"run": <this run's identity>, "records": [<module arguments>, ...]}``."""

RECORD_OPTIONS = ("state", "path", "inputs_digest", "files", "packages", "units", "package_manager", "outputs", "pending")
"""The module arguments of a record or removal that a deferred entry keeps (the flush's ``records`` suboptions)."""


def deferred_records(fact: t.Any, run: str) -> list[dict[str, t.Any]]:
    """This run's deferred record calls, in the order the roles made them.

    A fact of another run (a fact cache that kept the fact of a run that failed before its flush) holds none: that
    run's records were never written, and this run's probes already compared the host with the records on it.
    """
    if not isinstance(fact, dict) or not run or fact.get("run") != run or not isinstance(fact.get("records"), list):
        return []
    return [entry for entry in fact["records"] if isinstance(entry, dict) and isinstance(entry.get("path"), str)]


def defer(fact: t.Any, run: str, call: dict[str, t.Any]) -> dict[str, t.Any]:
    """The fact after deferring ``call`` (the module arguments of a record or removal, with its ``path``).

    A later call for the same record replaces the earlier one (a role run twice keeps its last) and goes last.
    """
    kept = [entry for entry in deferred_records(fact, run) if entry["path"] != call["path"]]
    return {"run": run, "records": kept + [{key: call[key] for key in RECORD_OPTIONS if key in call}]}


def take_deferred(fact: t.Any, run: str, path: str | None = None) -> tuple[list[dict[str, t.Any]], dict[str, t.Any] | None]:
    """The deferred calls to make now - all of them, or only ``path``'s - and the fact after; None: it stays as it is.

    A call that goes to the host anyway takes them with it: the flush all of them, an observation all of them (it
    reads the records), a probe, record or removal its own record's (it reads that record first).
    """
    entries = deferred_records(fact, run)
    now = [entry for entry in entries if path is None or entry["path"] == path]
    if not now:
        return [], None
    rest = [entry for entry in entries if entry not in now]
    return now, {"run": run, "records": rest} if rest else {}
