# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Controller side of gpuhost.nvidia.gpuhost_converged: the inputs digest of the role the task runs in.

The digest covers the role's name, the bytes of the role's files and of the collection's plugins (a changed task,
template or module is a changed input), every variable of the role's argument specification as resolved for the
host, the distribution, the kernel release, the package manager and the GPU facts that do not move by themselves.
The module on the host then only reads files, one package query and one systemctl call.

With ``state: observe`` (once per host at the start of playbooks/site.yml, registered as
``gpuhost_converged_observation``) the module observes every role's record in one call; a later probe in the same
playbook then answers on the controller from that observation while it holds (``_converged.local_answer``), and every
probe, record and removal updates the host fact that says what still holds (``_converged.status_after``). With
``gpu_facts: true`` the same call gathers ``ansible_facts.nvidia_gpu``, which pass through with that fact.

With ``gpuhost_converged_full_run`` true, a role's probe answers "not converged" on the controller, without a remote
call: every role takes its full path and records (Molecule's idempotence proves the full path, not the fast path).

With ``defer: true`` (the roles pass ``gpuhost_converged_defer``, which playbooks/site.yml turns on) a record or removal
makes no remote call: the complete module arguments go into the host fact ``gpuhost_converged_deferred``, tagged with
this controller run (``run_identity``), and ``state: flush`` at the end of the run writes them all in one call.
"""

from __future__ import annotations

import hashlib
import os
import re
import typing as t
import uuid

import yaml

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.template import Templar

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _files
# plain: what the observation's registered variable and fact hold, as plain JSON types.
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import plain

RECORD_DIR = _files.STATE_DIR + "/converged"
# This collection's roles: plugins/action/ is two levels under the collection's root.
ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
# The internal role whose probe.yml and record.yml run this action for the role that included it.
COMMON_ROLE = "internal_common"
FACT_KEYS = ("distribution", "distribution_version", "distribution_release", "os_family", "kernel", "architecture", "pkg_mgr")
DRIVER_KEYS = ("version", "branch", "kernel_module_type", "kernel_module_loaded", "kernel_module_version", "library_version")
GPU_KEYS = ("index", "uuid", "name", "pci_bus_id", "pci_device_id", "architecture", "compute_capability", "bound_driver", "iommu_group")
FUNCTION_KEYS = ("pci_bus_id", "pci_device_id", "class", "bound_driver", "iommu_group")
# The host facts that pick a role's per-OS variable files (the internal common role's vars.yml rule).
OS_KEYS = ("os_family", "distribution", "distribution_major_version", "distribution_version")
PKG_MGR = {"apt": "apt", "dnf": "dnf", "dnf5": "dnf5", "yum": "yum", "pacman": "pacman"}


def tree_digest(directories: list[str]) -> str:
    """sha256 over the relative names and bytes of every file under ``directories`` (bytecode caches left out)."""
    digest = hashlib.sha256()
    for top in directories:
        for base, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(base, name)
                digest.update(os.path.relpath(path, os.path.dirname(top)).encode("utf-8", "surrogateescape") + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def gpu_facts(facts: t.Any) -> t.Any:
    """The GPU facts a role plans from: identity, binding and driver; nothing that changes while the host idles."""
    if not isinstance(facts, dict):
        return None
    driver = facts.get("driver") if isinstance(facts.get("driver"), dict) else {}
    iommu = facts.get("iommu") if isinstance(facts.get("iommu"), dict) else {}
    return {
        "present": facts.get("present"),
        "state": facts.get("state"),
        "driver": {key: driver.get(key) for key in DRIVER_KEYS},
        "gpus": [{key: gpu.get(key) for key in GPU_KEYS} for gpu in facts.get("gpus") or [] if isinstance(gpu, dict)],
        "pci_functions": [{key: f.get(key) for key in FUNCTION_KEYS} for f in facts.get("pci_functions") or [] if isinstance(f, dict)],
        "iommu_enabled": iommu.get("enabled"),
    }


def run_identity() -> str:
    """This controller run: Ansible makes its local temporary directory anew (mkdtemp) for every run, at start-up,
    before the workers fork, so every task of the run sees the same one and no other run does."""
    return hashlib.sha256(str(C.DEFAULT_LOCAL_TMP).encode("utf-8", "surrogateescape")).hexdigest()[:32]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _playbook(self) -> str:
        """The playbook file of the play this task runs in ("" when Ansible does not say)."""
        try:
            where = self._task.get_play().get_path()
        except AttributeError:
            return ""
        return where.rpartition(":")[0] if where and ":" in where else ""

    def _observe(self, result: dict[str, t.Any], args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        if self._play_context.check_mode:
            # Check mode always runs every role's full path, and its probes ask the host themselves. No GPU facts either:
            # skipped, so site.yml's gpuhost.nvidia.nvidia_gpu_facts task runs instead.
            result.update(skipped=True, changed=False, msg="check mode: the roles' probes ask the host")
            return result
        args.setdefault("path", RECORD_DIR)
        # The records this run deferred are written first, in the same call: the observation reads them.
        writes, deferred = _converged.take_deferred((task_vars.get("ansible_facts") or {}).get(_converged.DEFERRED_FACT), run_identity())
        if writes:
            args["records"] = writes
        result.update(self._execute_module(module_name="gpuhost.nvidia.gpuhost_converged", module_args=args, task_vars=task_vars))
        if result.get("failed") or result.get("skipped"):
            return result
        identity = uuid.uuid4().hex
        playbook = self._playbook()
        # The module's facts (the GPU facts, with gpu_facts) and what of the observation holds.
        facts = dict(result.get("ansible_facts") or {}, **{_converged.OBSERVATION_FACT: _converged.observation_status(identity, playbook)})
        if deferred is not None:
            facts[_converged.DEFERRED_FACT] = deferred
        result.update(id=identity, playbook=playbook, ansible_facts=facts)
        return result

    def _flush(self, result: dict[str, t.Any], args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """state=flush: every record this run deferred, written in one call; none deferred, no call."""
        facts = task_vars.get("ansible_facts") or {}
        writes, deferred = _converged.take_deferred(facts.get(_converged.DEFERRED_FACT), run_identity())
        if not writes:
            result.update(changed=False, records_written=[], msg="no record was deferred in this run")
            return result
        args["records"] = writes
        result.update(self._execute_module(module_name="gpuhost.nvidia.gpuhost_converged", module_args=args, task_vars=task_vars))
        if result.get("failed"):
            return result
        observation = plain(task_vars.get(_converged.OBSERVATION_VAR))
        status = plain(facts.get(_converged.OBSERVATION_FACT))
        new_facts: dict[str, t.Any] = {_converged.DEFERRED_FACT: deferred}
        for entry in writes:
            after = _converged.status_after(observation, status, os.path.normpath(entry["path"]), entry.get("state", "record"), False)
            if after is not None:
                status = new_facts[_converged.OBSERVATION_FACT] = after
        result["ansible_facts"] = new_facts
        return result

    def _full_run(self, task_vars: dict[str, t.Any]) -> bool:
        """Whether this run asks every role for its full path (``gpuhost_converged_full_run``, e.g. Molecule's
        idempotence, which must prove the full path idempotent, not the fast path)."""
        value = task_vars.get(_converged.FULL_RUN_VAR, False)
        if isinstance(value, str) and self._templar is not None:
            value = self._templar.template(value)  # an inventory value such as "{{ lookup('env', ...) }}"
        return boolean(value, strict=False)

    def _role_context(self, name: str, role_path: str, task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """The variables a role's digest is templated with, the same inside the role and in its play before it.

        Inside a role Ansible has merged the role's defaults and vars into ``task_vars``; before the role (a pre-task of
        its play in playbooks/site.yml) they are not there. Both get: ``task_vars``, the role's defaults where nothing
        else sets a name, then the role's vars/main.yml and its per-OS files (the internal common role's vars.yml rule,
        templated from the internal common role's own vars) over everything. The role's own files never set a name of
        its argument specification (tests/unit/roles), so a user's value of one of those is seen the same in both places.
        """
        defaults = self._load_vars(os.path.join(role_path, "defaults", "main.yml"))
        own = self._load_vars(os.path.join(role_path, "vars", "main.yml"))
        common = self._load_vars(os.path.join(os.path.dirname(role_path), COMMON_ROLE, "vars", "main.yml"))
        context = dict(task_vars)
        for key, value in defaults.items():
            context.setdefault(key, value)
        context.update(own)
        facts = task_vars.get("ansible_facts") or {}
        if not all(key in facts for key in OS_KEYS):
            # No host facts (a play that gathered none, before the role gathers them): the role's probe follows its own
            # loading of them, and before the role site.yml always has them (the observation).
            return context
        lookup = dict(context, **common)
        lookup.update(ansible_parent_role_paths=[role_path], ansible_parent_role_names=["gpuhost.nvidia." + name])
        for path in Templar(loader=self._loader, variables=lookup).template(common["__internal_common_vars_files"]) or []:
            context.update(self._load_vars(str(path)))
        return context

    def _load_vars(self, path: str) -> dict[str, t.Any]:
        if not os.path.isfile(path):
            return {}
        try:
            # As Ansible loads a role's defaults and vars: their templates are trusted (ansible-core 2.19 templates no
            # other string). Not from the loader's cache, whose entry may be another load's (trusted or not).
            data = self._loader.load_from_file(path, cache="none", trusted_as_template=True)
        except TypeError:  # ansible-core 2.18: every string is a template; its cache switch is a boolean
            data = self._loader.load_from_file(path, cache=False)
        return dict(data) if isinstance(data, dict) else {}

    def _role_inputs(self, name: str, code_paths: list[str], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """What the role's inputs digest covers (module docs): the code, the variables of its argument specification,
        the host facts, the GPU facts, and the role's ``__<role>_converged_inputs`` (what else it plans from)."""
        role_path = code_paths[0]
        spec_file = os.path.join(role_path, "meta", "argument_specs.yml")
        with open(spec_file, "rb") as handle:
            # libyaml where PyYAML has it: the pure-Python parser took about 70 ms for one role's specification.
            specs = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        names = sorted(((specs.get("argument_specs") or {}).get("main") or {}).get("options") or {})
        context = self._role_context(name, role_path, task_vars)
        templar = Templar(loader=self._loader, variables=context)
        extra_name = "__%s_converged_inputs" % name
        facts = task_vars.get("ansible_facts") or {}
        collection_plugins = os.path.normpath(os.path.join(role_path, "..", "..", "plugins"))
        return {
            "role": name,
            "code": tree_digest(code_paths + ([collection_plugins] if os.path.isdir(collection_plugins) else [])),
            # Resolved as the role's argument validation resolves them.
            "variables": templar.template({key: context[key] for key in names if key in context}),
            "facts": {key: facts.get(key) for key in FACT_KEYS},
            "gpu": gpu_facts(facts.get("nvidia_gpu")),
            "extra": templar.template(context[extra_name]) if extra_name in context else {},
        }

    def _before_role(self, result: dict[str, t.Any], args: dict[str, t.Any], task_vars: dict[str, t.Any]) -> dict[str, t.Any]:
        """``role`` (a pre-task of the role's play): the role's probe answered on the controller from this run's
        observation, never by the host; ``roles`` (the first play): which of those roles' records hold, changing
        nothing, so that their variable checks can be left to a role that does take its full path."""
        single = args.pop("role", None)
        names = [single] if single else list(args.pop("roles", None) or [])
        facts = task_vars.get("ansible_facts") or {}
        observation = plain(task_vars.get(_converged.OBSERVATION_VAR))
        status = plain(facts.get(_converged.OBSERVATION_FACT))
        common_path = os.path.join(ROLES_DIR, COMMON_ROLE)
        # The records' directory: the one the roles' own probes and records use (path: another, as for observe).
        directory = os.path.normpath(str(args.pop("path", None) or RECORD_DIR))
        answers: dict[str, dict[str, t.Any]] = {}
        for name in names:
            role_path = os.path.join(ROLES_DIR, str(name))
            # A role with a converged record: its argument specification and the hand-back its play includes.
            if not re.match(r"^[a-z][a-z0-9_]*$", str(name)) or not all(
                    os.path.isfile(os.path.join(role_path, *part)) for part in (("meta", "argument_specs.yml"), ("tasks", "converged.yml"))):
                raise AnsibleActionFail("gpuhost_converged: role %r is not a role of gpuhost.nvidia with a converged record "
                                        "(one of %s)" % (name, ", ".join(sorted(
                                            d for d in os.listdir(ROLES_DIR) if os.path.isfile(os.path.join(ROLES_DIR, d, "tasks", "converged.yml"))))))
            path = "%s/%s.json" % (directory, name)
            answer, digest = None, None
            if self._play_context.check_mode:
                reason = "check mode: the role probes the host itself"
            elif self._full_run(task_vars):
                reason = "%s is true: every role takes its full path" % _converged.FULL_RUN_VAR
            elif not single and not _converged.may_hold(observation, path):
                # The first play's question, where no digest is needed: the observation has no record here that could
                # hold (none, unusable, drifted, or not observed).
                reason = "the observation finds no record that holds: the role probes for itself"
            else:
                try:
                    digest = _converged.inputs_digest(self._role_inputs(str(name), [role_path, common_path], task_vars))
                except AnsibleError as exc:
                    reason = "the role's inputs cannot be resolved before the role: %s" % exc
                if digest is not None:
                    answer = _converged.local_answer(observation, status, path, digest, self._playbook())
                    reason = "the observation cannot answer: the role asks the host itself" if answer is None else ""
            if answer is None:
                answer = {"converged": False, "changed": False, "path": path, "outputs": {}, "drift": [reason]}
            answers[str(name)] = dict(answer, inputs_digest=digest)
        if not single:
            result.update(changed=False, converged_roles=[name for name, answer in answers.items() if answer["converged"]])
            return result
        answer = answers[single]
        result.update(answer, role=single)
        # A converged answer uses the record, as the role's own probe would (its next probe asks the host); any other
        # answer leaves the observation as it was, for the role's own probe.
        after = _converged.status_after(observation, status, answer["path"], "probe", True) if answer["converged"] else None
        if after is not None:
            result["ansible_facts"] = {_converged.OBSERVATION_FACT: after}
        return result

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        defer = boolean(args.pop("defer", False), strict=False)
        args.pop("records", None)  # the deferred calls come from the host fact only
        # role_name and role_path are the magic variables of the role this task runs in. A task of the internal common
        # role (its probe.yml and record.yml) works for the role that included it, and that role's record and digest
        # cover the common role's files too.
        role_path = task_vars.get("role_path")
        name = str(task_vars["role_name"]).rsplit(".", maxsplit=1)[-1] if role_path and task_vars.get("role_name") else None
        code_paths = [role_path] if role_path else []
        if name == COMMON_ROLE and task_vars.get("ansible_parent_role_paths"):
            code_paths = [str(task_vars["ansible_parent_role_paths"][0]), str(role_path)]
            role_path = code_paths[0]
            name = str(task_vars["ansible_parent_role_names"][0]).rsplit(".", maxsplit=1)[-1]
        state = args.get("state", "probe")
        facts = task_vars.get("ansible_facts") or {}
        if "package_manager" not in args and PKG_MGR.get(facts.get("pkg_mgr")):
            args["package_manager"] = PKG_MGR[facts["pkg_mgr"]]
        if state == "observe":
            return self._observe(result, args, task_vars)
        if state == "flush":
            return self._flush(result, args, task_vars)
        if state == "probe" and (args.get("role") or args.get("roles")):
            return self._before_role(result, args, task_vars)
        if not args.get("path"):
            if name is None:
                raise AnsibleActionFail("gpuhost_converged outside a role needs path")
            args["path"] = "%s/%s.json" % (RECORD_DIR, name)
        extra = args.pop("inputs", None) or {}
        if state in ("probe", "record") and not args.get("inputs_digest"):
            if name is None:
                raise AnsibleActionFail("gpuhost_converged outside a role needs inputs_digest")
            inputs = self._role_inputs(name, code_paths, task_vars)
            if extra:
                inputs["extra"] = extra
            args["inputs_digest"] = _converged.inputs_digest(inputs)
        # The observation this run took at its start, and the host fact that says what of it still holds.
        observation = plain(task_vars.get(_converged.OBSERVATION_VAR))
        status = plain(facts.get(_converged.OBSERVATION_FACT))
        path = os.path.normpath(str(args["path"]))
        new_facts: dict[str, t.Any] = {}
        if defer and state in ("record", "absent"):
            # Everything that needs the role is in args now; the host side waits for the flush at the end of the run.
            call = plain(dict(args, path=path))
            new_facts[_converged.DEFERRED_FACT] = _converged.defer(facts.get(_converged.DEFERRED_FACT), run_identity(), call)
            result.update(changed=False, deferred=True, path=path)
        else:
            # A record of this path deferred earlier in the run is written first, in the same call: this call reads it.
            writes, deferred = _converged.take_deferred(facts.get(_converged.DEFERRED_FACT), run_identity(), path)
            if writes:
                args["records"] = writes
            answer = None
            full_run = state == "probe" and name is not None and self._full_run(task_vars)
            if full_run and not writes:
                answer = _converged.full_run_answer(path)  # no remote call: the role's full path runs anyway
            elif state == "probe" and not writes and not self._play_context.check_mode:
                answer = _converged.local_answer(observation, status, path, args["inputs_digest"], self._playbook())
            result.update(answer if answer is not None else
                          self._execute_module(module_name="gpuhost.nvidia.gpuhost_converged", module_args=args, task_vars=task_vars))
            if result.get("failed"):
                return result
            if full_run and writes:
                result.update(_converged.full_run_answer(path), changed=bool(result.get("changed")))
            if deferred is not None:
                new_facts[_converged.DEFERRED_FACT] = deferred
        # A deferred record or removal counts as made now for the observation: a probe after it asks the host.
        after = _converged.status_after(observation, status, path, state, bool(result.get("converged")))
        if after is not None:
            new_facts[_converged.OBSERVATION_FACT] = after
        if new_facts:
            result["ansible_facts"] = new_facts
        return result
