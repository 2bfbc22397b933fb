# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller side of the gpuhost_converged tests: the action plugin run as a task, its module calls answered by the
module in-process (the conftest's ``module``)."""

from __future__ import annotations

import copy
import json
import types

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.nvidia.plugins.action import gpuhost_converged as action_plugin

PLAYBOOK = "/srv/ansible/playbooks/site.yml"


class Controller:
    """One host's variables on the controller, updated from each task's result as the strategy does: returned
    ``ansible_facts`` into the host's facts, a registered result into its variables."""

    def __init__(self, module, playbook=PLAYBOOK, tagged=False):
        self.module = module
        self.playbook = playbook
        # tagged: the variables reach the plugin as they are (a deep copy), with ansible-core's trust tags on templates
        # (an inventory's and a role's templates are trusted); otherwise as plain JSON, as the strategy's copy was.
        self.tagged = tagged
        self.vars = {"ansible_facts": {"pkg_mgr": "apt"}}
        self.remote = []  # the module calls that reached the host

    def run(self, args, register=None, check_mode=False, playbook=None):
        play = types.SimpleNamespace(get_path=lambda: (playbook or self.playbook) + ":21")
        task = types.SimpleNamespace(args=dict(args), async_val=0, check_mode=check_mode, action="gpuhost.nvidia.gpuhost_converged",
                                     get_play=lambda: play)
        connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/tmp/ansible-tmp"))
        loader = DataLoader()
        plugin = action_plugin.ActionModule(task, connection, types.SimpleNamespace(check_mode=check_mode), loader, Templar(loader=loader), None)

        def execute_module(module_name, module_args, task_vars):
            assert module_name == "gpuhost.nvidia.gpuhost_converged"
            self.remote.append(json.loads(json.dumps(module_args)))
            return self.module(module_args, check_mode=check_mode)

        plugin._execute_module = execute_module
        result = plugin.run(task_vars=copy.deepcopy(self.vars) if self.tagged else json.loads(json.dumps(self.vars)))
        if "ansible_facts" in result:
            self.vars["ansible_facts"].update(result["ansible_facts"])
        if register:
            self.vars[register] = result
        return result
