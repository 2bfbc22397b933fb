# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""repository_key's apt_update and apt_versions: the one source's lists fetched in the same call as its key and file
when either changed (or when its lists offer none of the packages), the versions they offer, check mode's prediction,
and the refusals, which come before anything is read or fetched."""

from __future__ import annotations

import pytest

import gpg_keys

from ansible.module_utils import basic
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apt
from ansible_collections.gpuhost.nvidia.plugins.modules import repository_key

pytestmark = pytest.mark.skipif(gpg_keys.GPG is None, reason=gpg_keys.MISSING)

MADISON = (" nvidia-container-toolkit | 1.18.0-1 | file:/srv/repo ./ Packages\n"
           " nvidia-container-toolkit | 1.17.8-1 | file:/srv/repo ./ Packages\n"
           " nvidia-container-toolkit | 1.17.8-1 | file:/srv/repo ./ Sources\n")


class FakeApt:
    """apt-get update and apt-cache madison on a host whose lists of the source are fetched or not (``fetched``)."""

    def __init__(self, fetched=False, update_rc=0):
        self.fetched = fetched
        self.update_rc = update_rc
        self.calls = []

    def run_command(self, argv, **kwargs):
        """AnsibleModule.run_command (bound: no module argument); argv[0] is what get_bin_path found (None in tests)."""
        self.calls.append(argv[1:])
        assert kwargs["environ_update"]["LC_ALL"] == "C"
        if argv[1] == "update":
            if self.update_rc:
                return self.update_rc, "", "E: The repository 'file:/srv/repo ./ Release' is not signed.\n"
            self.fetched = True
            return 0, "", ""
        assert argv[1] == "madison"
        return 0, MADISON if self.fetched else "", ""


@pytest.fixture
def apt(monkeypatch):
    fake = FakeApt()
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake.run_command)
    return fake


def options(tmp_path, keys, **extra):
    (tmp_path / "sources.list.d").mkdir(exist_ok=True)
    source = str(tmp_path / "sources.list.d" / "test.sources")
    base = {"url": "file://%s/mirror/public.asc" % tmp_path, "fingerprint": keys["pinned"].fingerprint,
            "dest": str(tmp_path / "etc" / "keyrings" / "test.gpg"), "mode": "0644",
            "files": [{"path": source, "content": "Types: deb\nSigned-By: %s/etc/keyrings/test.gpg\n" % tmp_path}],
            "apt_update": source, "apt_versions": ["nvidia-container-toolkit"]}
    base.update(extra)
    return base


@pytest.fixture
def mirror(tmp_path, keys):
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "public.asc").write_bytes(keys["pinned"].armored)


UPDATE = _apt.lists_update_argv("")[1:2]
MADISON_CALL = ["madison", "nvidia-container-toolkit"]


def test_a_new_source_is_fetched_and_asked_in_the_same_call_then_only_asked(run_module, tmp_path, keys, mirror, apt):
    first = run_module(repository_key, options(tmp_path, keys))
    source = str(tmp_path / "sources.list.d" / "test.sources")
    assert apt.calls == [["update", "-o", "Dir::Etc::sourcelist=%s" % source, "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"],
                         MADISON_CALL]
    assert (first["changed"], first["lists_updated"], first["lists_pending"]) == (True, True, False)
    assert first["versions"] == {"nvidia-container-toolkit": ["1.18.0-1", "1.17.8-1"]}
    apt.calls.clear()
    again = run_module(repository_key, options(tmp_path, keys))
    assert apt.calls == [MADISON_CALL]
    assert (again["changed"], again["lists_updated"], again["versions"]) == (False, False, first["versions"])
    # Check mode on the converged host asks too (read-only), and predicts no change.
    apt.calls.clear()
    checked = run_module(repository_key, options(tmp_path, keys), check_mode=True)
    assert apt.calls == [MADISON_CALL] and (checked["changed"], checked["lists_pending"], checked["versions"]) == (False, False, first["versions"])


def test_check_mode_fetches_nothing_and_says_the_lists_are_pending(run_module, tmp_path, keys, mirror, apt):
    predicted = run_module(repository_key, options(tmp_path, keys), check_mode=True)
    assert apt.calls == [] and not (tmp_path / "sources.list.d" / "test.sources").exists()
    assert (predicted["changed"], predicted["lists_updated"], predicted["lists_pending"], predicted["versions"]) == (True, False, True, {})


def test_a_changed_source_file_is_fetched_again_a_changed_hold_is_not(run_module, tmp_path, keys, mirror, apt):
    run_module(repository_key, options(tmp_path, keys))
    pref = str(tmp_path / "test.pref")
    apt.calls.clear()
    with_hold = options(tmp_path, keys)
    with_hold["files"] = with_hold["files"] + [{"path": pref, "content": "Package: a\nPin: version 1.17.8-*\nPin-Priority: 1001\n"}]
    held = run_module(repository_key, with_hold)
    assert held["changed"] and not held["lists_updated"] and apt.calls == [MADISON_CALL]
    apt.calls.clear()
    moved = options(tmp_path, keys)
    moved["files"] = [{"path": moved["files"][0]["path"], "content": moved["files"][0]["content"] + "Components: main\n"}]
    result = run_module(repository_key, moved)
    assert result["lists_updated"] and [call[0] for call in apt.calls] == ["update", "madison"]


def test_lists_an_earlier_run_left_unfetched_are_fetched(run_module, tmp_path, keys, mirror, apt):
    run_module(repository_key, options(tmp_path, keys))
    apt.fetched = False  # the source was written, the lists never fetched (an earlier run stopped in between)
    apt.calls.clear()
    predicted = run_module(repository_key, options(tmp_path, keys), check_mode=True)
    assert apt.calls == [MADISON_CALL] and (predicted["changed"], predicted["lists_pending"], predicted["versions"]) == (False, True, {})
    apt.calls.clear()
    repaired = run_module(repository_key, options(tmp_path, keys))
    assert [call[0] for call in apt.calls] == ["madison", "update", "madison"]
    assert (repaired["changed"], repaired["lists_updated"]) == (True, True) and repaired["versions"]["nvidia-container-toolkit"][0] == "1.18.0-1"


def test_a_failed_fetch_names_the_source_and_apt_s_error(run_module, tmp_path, keys, mirror, apt):
    apt.update_rc = 100
    failed = run_module(repository_key, options(tmp_path, keys))
    assert failed["failed"] and failed["rc"] == 100
    assert failed["msg"].startswith("fetching the package lists of %s failed (apt-get update " % (tmp_path / "sources.list.d" / "test.sources"))
    assert failed["msg"].endswith("exit 100): E: The repository 'file:/srv/repo ./ Release' is not signed.")


@pytest.mark.parametrize("extra, message", [
    ({"apt_versions": ["nvidia-container-toolkit; rm -rf /"]},
     "apt_versions[0]: 'nvidia-container-toolkit; rm -rf /' holds whitespace"),
    ({"apt_versions": ["-oAPT::Foo=1"]}, "apt_versions[0]: '-oAPT::Foo=1' is not a Debian package name"),
    ({"apt_versions": ["Nvidia"]}, "apt_versions[0]: 'Nvidia' is not a Debian package name"),
    ({"apt_update": "sources.list.d/test.sources"}, "apt_update: 'sources.list.d/test.sources' is not an absolute path"),
    ({"apt_update": "/etc/apt/../shadow.sources"}, "apt_update: '/etc/apt/../shadow.sources' has a '.' or '..' component"),
    ({"apt_update": "/etc/apt/sources.list.d/x.sources -o Dir=/"}, "apt_update: '/etc/apt/sources.list.d/x.sources -o Dir=/' holds whitespace"),
    ({"apt_update": "/etc/shadow"}, "apt_update: '/etc/shadow' is not a .sources or .list file"),
    ({"apt_update": None}, "apt_versions: needs apt_update"),
])
def test_bad_apt_options_are_refused_before_anything_is_read(run_module, tmp_path, keys, mirror, apt, extra, message):
    result = run_module(repository_key, options(tmp_path, keys, **extra))
    assert result["failed"] and message in result["msg"], result["msg"]
    assert apt.calls == [] and not (tmp_path / "etc").exists() and not (tmp_path / "sources.list.d" / "test.sources").exists()


def test_the_check_only_call_fetches_nothing(run_module, tmp_path, keys, apt):
    result = run_module(repository_key, {"dest": str(tmp_path / "k.gpg"), "fingerprint": keys["pinned"].fingerprint,
                                         "apt_update": "/etc/apt/sources.list.d/x.sources"})
    assert result["failed"] and result["msg"] == "apt_update: only with url or src (the check-only call fetches nothing)" and apt.calls == []


def test_madison_parse_keeps_order_and_each_version_once():
    text = MADISON + " other | 2.0 | file:/x ./ Packages\nnot a madison line\n"
    assert _apt.parse_madison(text, ["nvidia-container-toolkit", "missing"]) == {
        "nvidia-container-toolkit": ["1.18.0-1", "1.17.8-1"], "missing": []}


def test_a_key_written_again_fetches_the_lists_check_mode_asks_the_current_ones(run_module, tmp_path, keys, mirror, apt):
    """The source unchanged, the keyring written again (gone here; a renewed key alike): the real run fetches the lists
    again, to check them against the key; check mode leaves them as they are and asks them, so it predicts the pick."""
    run_module(repository_key, options(tmp_path, keys))
    (tmp_path / "etc" / "keyrings" / "test.gpg").unlink()
    apt.calls.clear()
    predicted = run_module(repository_key, options(tmp_path, keys), check_mode=True)
    assert apt.calls == [MADISON_CALL]
    assert (predicted["changed"], predicted["key_changed"], predicted["lists_pending"]) == (True, True, False)
    assert predicted["versions"]["nvidia-container-toolkit"] == ["1.18.0-1", "1.17.8-1"]
    apt.calls.clear()
    written = run_module(repository_key, options(tmp_path, keys))
    assert [call[0] for call in apt.calls] == ["update", "madison"] and written["lists_updated"] and written["key_changed"]
