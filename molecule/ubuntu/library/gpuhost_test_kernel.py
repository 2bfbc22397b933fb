"""Test-only fact module of the ubuntu Molecule scenario: the kernel release a test host presents to Ansible.

A container runs the CI machine's kernel, so ``uname -r`` there can never be Ubuntu's ``6.8.0-1031-azure``. The
scenario lists this module after ``ansible.builtin.setup`` in ``ansible_facts_modules`` (Ansible's gather_facts runs
them in order and the later one's facts win); it reads the release prepare.yml wrote into
/etc/gpuhost-test-kernel-release and returns it as the ``kernel`` fact, the one fact the roles read the running
kernel from. A host without that file gets no facts from it.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

RELEASE_FILE = "/etc/gpuhost-test-kernel-release"


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    try:
        with open(RELEASE_FILE, encoding="utf-8") as handle:
            release = handle.read().strip()
    except FileNotFoundError:
        module.exit_json(changed=False, ansible_facts={})
    module.exit_json(changed=False, ansible_facts={"kernel": release} if release else {})


if __name__ == "__main__":
    main()
