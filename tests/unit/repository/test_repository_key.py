# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""repository_key: the wrong-key, tampered-key and unpinned-key refusals for every role that adds a repository (the
roles call this module through the internal _repository role and test only that they pass their variables), check
mode and diff, and a converged run that fetches nothing."""

from __future__ import annotations

import http.server
import os
import stat
import threading

import pytest

import gpg_keys

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpg
from ansible_collections.gpuhost.nvidia.plugins.modules import repository_key

pytestmark = pytest.mark.skipif(gpg_keys.GPG is None, reason=gpg_keys.MISSING)


@pytest.fixture
def repo(tmp_path, keys):
    """A mirror directory with the pinned key, the rogue key and a tampered copy of the pinned key."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "public.asc").write_bytes(keys["pinned"].armored)
    (mirror / "rogue.asc").write_bytes(keys["rogue"].armored)
    tampered = bytearray(keys["pinned"].binary)
    tampered[20] ^= 0x01  # one bit of the key material: another fingerprint
    (mirror / "tampered.gpg").write_bytes(bytes(tampered))
    return mirror


def snapshot(root):
    return sorted((os.path.relpath(os.path.join(d, f), root), open(os.path.join(d, f), "rb").read())
                  for d, _dirs, files in os.walk(root) for f in files)


def args(tmp_path, keys, **extra):
    base = {"url": "file://%s/mirror/public.asc" % tmp_path, "fingerprint": keys["pinned"].fingerprint,
            "dest": str(tmp_path / "etc" / "keyrings" / "test.gpg"), "mode": "0644"}
    base.update(extra)
    return base


def test_installs_the_dearmored_keyring_then_fetches_nothing(run_module, tmp_path, keys, repo):
    options = args(tmp_path, keys)
    predicted = run_module(repository_key, options, check_mode=True)
    assert not (tmp_path / "etc").exists()
    first = run_module(repository_key, options)
    assert (predicted["changed"], first["changed"], first["fetched"]) == (True, True, True)
    dest = tmp_path / "etc" / "keyrings" / "test.gpg"
    assert dest.read_bytes() == gpg_keys.dearmor(keys["home"], keys["pinned"].armored)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644 and stat.S_IMODE(dest.parent.stat().st_mode) == 0o755
    assert first["fingerprints"] == [keys["pinned"].fingerprint] and first["format"] == "binary"
    assert first["diff"]["before_header"].endswith("(absent)") and "primary key: %s" % keys["pinned"].fingerprint in first["diff"]["after"]
    # Converged: the source may even be gone, nothing is fetched.
    (repo / "public.asc").unlink()
    for check_mode in (True, False):
        again = run_module(repository_key, options, check_mode=check_mode)
        assert (again["changed"], again["fetched"], again["fingerprints"]) == (False, False, [keys["pinned"].fingerprint])


def test_writes_the_armored_key_for_rpm(run_module, tmp_path, keys, repo):
    dest = tmp_path / "etc" / "pki" / "RPM-GPG-KEY-test"
    result = run_module(repository_key, args(tmp_path, keys, dest=str(dest), format="armored", url="file:%s/public.asc" % repo))
    assert result["changed"] and dest.read_bytes().startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    assert gpg_keys.colons_fingerprints(keys["home"], dest.read_bytes()) == [keys["pinned"].fingerprint]
    # The same key written as a binary keyring is not what was asked: it is replaced.
    dest.write_bytes(keys["pinned"].binary)
    again = run_module(repository_key, args(tmp_path, keys, dest=str(dest), format="armored"))
    assert again["changed"] and again["fetched"] and dest.read_bytes().startswith(b"-----BEGIN PGP")


@pytest.mark.parametrize("check_mode", [True, False])
@pytest.mark.parametrize("case", ["rogue", "tampered", "unpinned", "installed_rogue"])
def test_refusals_change_nothing_and_name_both_fingerprints(run_module, tmp_path, keys, repo, case, check_mode):
    pinned, rogue = keys["pinned"].fingerprint, keys["rogue"].fingerprint
    options = args(tmp_path, keys)
    if case == "rogue":
        options["url"] = "file://%s/rogue.asc" % repo
    elif case == "tampered":
        options["src"] = str(repo / "tampered.gpg")
        del options["url"]
    elif case == "unpinned":
        options["fingerprint"] = ""
    else:  # a keyring that holds another key is replaced only by the pinned one: here the source is the rogue key too
        (tmp_path / "etc" / "keyrings").mkdir(parents=True)
        (tmp_path / "etc" / "keyrings" / "test.gpg").write_bytes(keys["rogue"].binary)
        options["url"] = "file://%s/rogue.asc" % repo
    before = snapshot(tmp_path)
    result = run_module(repository_key, options, check_mode=check_mode)
    assert result["failed"] and result.get("changed") in (None, False)
    assert snapshot(tmp_path) == before
    if case == "unpinned":
        assert result["msg"].startswith("fingerprint is empty: a repository key is trusted only when its fingerprint is pinned")
    elif case == "tampered":
        assert result["msg"].startswith("the key at %s does not match the pinned fingerprint: expected %s, got " % (repo / "tampered.gpg", pinned))
        assert result["msg"].endswith("Nothing was installed. Check the URL, or pin the new key's fingerprint.")
    else:
        assert "does not match the pinned fingerprint: expected %s, got %s. Nothing was installed." % (pinned, rogue) in result["msg"]


def test_pasted_fingerprint_forms_are_one_pin(run_module, tmp_path, keys, repo):
    fpr = keys["pinned"].fingerprint
    spaced = " ".join(fpr[i:i + 4] for i in range(0, 40, 4)).replace(fpr[16:20] + " ", fpr[16:20] + "  ").lower()
    result = run_module(repository_key, args(tmp_path, keys, fingerprint="0x" + spaced))
    assert result["changed"] and result["fingerprint"] == fpr


def test_a_file_holding_the_pinned_and_another_key_is_refused(run_module, tmp_path, keys, repo):
    (repo / "both.gpg").write_bytes(keys["pinned"].binary + keys["rogue"].binary)
    result = run_module(repository_key, args(tmp_path, keys, url="file://%s/both.gpg" % repo))
    assert result["failed"] and "one key is pinned, so the file must hold that key alone" in result["msg"]


def test_verify_only_checks_the_installed_keyring(run_module, tmp_path, keys):
    dest = tmp_path / "cuda.gpg"
    options = {"dest": str(dest), "fingerprint": keys["pinned"].fingerprint}
    missing = run_module(repository_key, options)
    assert missing["failed"] and missing["msg"] == "the key at %s cannot be checked: it does not exist. Nothing was installed." % dest
    dest.write_bytes(keys["rogue"].armored)
    wrong = run_module(repository_key, options)
    assert wrong["failed"] and wrong["msg"] == "the key file %s does not hold exactly the pinned key: expected %s, got %s. Nothing was installed." % (
        dest, keys["pinned"].fingerprint, keys["rogue"].fingerprint)
    dest.write_bytes(keys["pinned"].armored)
    ok = run_module(repository_key, options)
    assert (ok["changed"], ok["fetched"], ok["fingerprints"], ok["format"]) == (False, False, [keys["pinned"].fingerprint], "armored")
    assert dest.read_bytes() == keys["pinned"].armored


def test_refresh_fetches_and_keeps_an_unchanged_key(run_module, tmp_path, keys, repo):
    options = args(tmp_path, keys, refresh=True)
    run_module(repository_key, options)
    again = run_module(repository_key, options)
    assert (again["changed"], again["fetched"]) == (False, True)


@pytest.mark.parametrize("bad, message", [
    ({"url": "ftp://mirror/key"}, "url: 'ftp://mirror/key' is not an http(s):// or file:// URL"),
    ({"url": "file:///srv/key.asc\nSigned-By: /tmp/x"}, "holds the control character"),
    ({"url": "file:///nonexistent/key.asc"}, "the key at file:///nonexistent/key.asc does not exist"),
    ({"fingerprint": "3BF863CC"}, "fingerprint: '3BF863CC' is not a key fingerprint of 40 or 64 hex digits"),
])
def test_bad_options_are_refused(run_module, tmp_path, keys, repo, bad, message):
    result = run_module(repository_key, args(tmp_path, keys, **bad))
    assert result["failed"] and message in result["msg"]
    assert not (tmp_path / "etc").exists()


def test_dest_that_is_a_directory_is_refused(run_module, tmp_path, keys, repo):
    (tmp_path / "etc" / "keyrings" / "test.gpg").mkdir(parents=True)
    result = run_module(repository_key, args(tmp_path, keys))
    assert result["failed"] and "is a directory, not a regular file" in result["msg"]


def test_fetches_over_http(run_module, tmp_path, keys, repo):
    handler = type("Handler", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(repo)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = "http://127.0.0.1:%d" % server.server_address[1]
        result = run_module(repository_key, args(tmp_path, keys, url=base + "/public.asc"))
        assert result["changed"] and result["fetched"]
        missing = run_module(repository_key, args(tmp_path, keys, url=base + "/nothing.asc", dest=str(tmp_path / "other.gpg")))
        assert missing["failed"] and missing["msg"].startswith("cannot fetch the key at %s/nothing.asc: " % base) and missing["status"] == 404
    finally:
        server.shutdown()


def with_files(tmp_path, keys, pin="Package: a b\nPin: version 1.17.8-*\nPin-Priority: 1001\n", **extra):
    """The key plus the files that name it (apt's .sources file and preferences hold), as internal_repository passes them."""
    (tmp_path / "sources.list.d").mkdir(exist_ok=True)
    (tmp_path / "preferences.d").mkdir(exist_ok=True)
    files = [{"path": str(tmp_path / "sources.list.d" / "test.sources"), "content": "Types: deb\nSigned-By: /etc/keyrings/test.gpg\n"},
             {"path": str(tmp_path / "preferences.d" / "test.pref"), "content": pin}]
    return args(tmp_path, keys, files=files, **extra)


def test_writes_the_files_that_name_the_key_in_the_same_call(run_module, tmp_path, keys, repo):
    options = with_files(tmp_path, keys)
    predicted = run_module(repository_key, options, check_mode=True)
    assert not (tmp_path / "etc").exists() and not list((tmp_path / "sources.list.d").iterdir())
    first = run_module(repository_key, options)
    for result in (predicted, first):
        assert (result["changed"], result["key_changed"]) == (True, True)
        assert [(f["path"].rsplit("/", 1)[1], f["changed"], f["exists"]) for f in result["files"]] == [
            ("test.sources", True, True), ("test.pref", True, True)]
        assert [d["after_header"].rsplit("/", 1)[1] for d in result["diff"]] == ["test.gpg", "test.sources", "test.pref"]
    sources = tmp_path / "sources.list.d" / "test.sources"
    assert sources.read_text() == "Types: deb\nSigned-By: /etc/keyrings/test.gpg\n" and stat.S_IMODE(sources.stat().st_mode) == 0o644
    assert (tmp_path / "preferences.d" / "test.pref").read_text().startswith("Package: a b\n")
    for check_mode in (True, False):
        again = run_module(repository_key, options, check_mode=check_mode)
        assert (again["changed"], again["key_changed"], [f["changed"] for f in again["files"]]) == (False, False, [False, False])
    # Only the hold changes: the key is untouched, so the caller refreshes no package lists.
    changed_pin = run_module(repository_key, with_files(tmp_path, keys, pin="Package: a\nPin: version 1.18.0-*\nPin-Priority: 1001\n"))
    assert (changed_pin["changed"], changed_pin["key_changed"], [f["changed"] for f in changed_pin["files"]]) == (True, False, [False, True])
    assert changed_pin["diff"][1]["before"].startswith("Package: a b\n")


def test_a_file_without_content_is_removed(run_module, tmp_path, keys, repo):
    run_module(repository_key, with_files(tmp_path, keys))
    hold = tmp_path / "preferences.d" / "test.pref"
    options = with_files(tmp_path, keys, pin=None)
    predicted = run_module(repository_key, options, check_mode=True)
    assert hold.exists()
    removed = run_module(repository_key, options)
    for result in (predicted, removed):
        assert result["changed"] and not result["key_changed"]
        assert (result["files"][1]["changed"], result["files"][1]["exists"]) == (True, False)
        assert result["diff"][1]["after_header"] == "%s (absent)" % hold and result["diff"][1]["before"].startswith("Package: a b")
    assert not hold.exists()
    again = run_module(repository_key, options)
    assert not again["changed"] and again["files"][1] == {"path": str(hold), "changed": False, "exists": False}


@pytest.mark.parametrize("check_mode", [True, False])
def test_a_refused_key_writes_none_of_the_files(run_module, tmp_path, keys, repo, check_mode):
    options = with_files(tmp_path, keys, url="file://%s/rogue.asc" % repo)
    before = snapshot(tmp_path)
    result = run_module(repository_key, options, check_mode=check_mode)
    assert result["failed"] and "does not match the pinned fingerprint" in result["msg"]
    assert snapshot(tmp_path) == before


def test_files_that_cannot_be_written_with_the_key_are_refused(run_module, tmp_path, keys, repo):
    dest = str(tmp_path / "etc" / "keyrings" / "test.gpg")
    check_only = run_module(repository_key, {"dest": dest, "fingerprint": keys["pinned"].fingerprint,
                                             "files": [{"path": str(tmp_path / "x.sources"), "content": "x\n"}]})
    assert check_only["failed"] and check_only["msg"] == "files: only written with url or src (the check-only call writes nothing)"
    is_dest = run_module(repository_key, args(tmp_path, keys, files=[{"path": dest, "content": "x\n"}]))
    assert is_dest["failed"] and is_dest["msg"] == "files: %s is dest, the key file" % dest
    twice = str(tmp_path / "x.sources")
    double = run_module(repository_key, args(tmp_path, keys, files=[{"path": twice, "content": "a\n"}, {"path": twice, "content": None}]))
    assert double["failed"] and double["msg"] == "files: %s given twice" % twice
    relative = run_module(repository_key, args(tmp_path, keys, files=[{"path": "x.sources", "content": "a\n"}]))
    assert relative["failed"] and "files[0].path" in relative["msg"]
    no_dir = run_module(repository_key, args(tmp_path, keys, files=[{"path": str(tmp_path / "missing" / "x.sources"), "content": "a\n"}]))
    assert no_dir["failed"] and no_dir["msg"].endswith("x.sources': its directory '%s' does not exist. Nothing was installed." % (tmp_path / "missing"))
    assert not (tmp_path / "x.sources").exists() and not (tmp_path / "etc").exists()


# --- expired, revoked and expiring keys; mode, owner and group checked before anything is written ---------------------

def _warnings(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(repository_key.AnsibleModule, "warn", lambda self, message: seen.append(message))
    return seen


@pytest.mark.parametrize("check_mode", [True, False])
@pytest.mark.parametrize("name, says", [("expired", "expired on 2020-12-31 00:00:00 UTC"), ("revoked", "is revoked: a key revocation signature made ")])
@pytest.mark.parametrize("form", ["armored", "binary"])
def test_expired_and_revoked_keys_are_refused_and_nothing_is_written(run_module, tmp_path, keys, check_mode, name, says, form):
    source = tmp_path / ("source.%s" % ("asc" if form == "armored" else "gpg"))
    source.write_bytes(getattr(keys[name], form))
    options = args(tmp_path, keys, url="file://%s" % source, fingerprint=keys[name].fingerprint, files=[
        {"path": str(tmp_path / "test.sources"), "content": "Types: deb\n"}])
    before = snapshot(tmp_path)
    result = run_module(repository_key, options, check_mode=check_mode)
    assert result["failed"] and result.get("changed") in (None, False)
    assert result["msg"].startswith("the key %s at file://%s %s" % (keys[name].fingerprint, source, says)), result["msg"]
    assert result["msg"].endswith("Nothing was installed. Check the URL, or pin the new key's fingerprint.")
    assert snapshot(tmp_path) == before


def test_an_installed_key_that_expired_is_fetched_again_and_replaced_by_its_renewal(run_module, tmp_path, keys):
    renewed = keys["renewed"]
    dest = tmp_path / "etc" / "keyrings" / "test.gpg"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(renewed.earlier)  # the same key as installed in 2020: expired since 2021
    (tmp_path / "renewed.asc").write_bytes(renewed.armored)
    options = args(tmp_path, keys, url="file://%s/renewed.asc" % tmp_path, fingerprint=renewed.fingerprint)
    predicted = run_module(repository_key, options, check_mode=True)
    assert (predicted["changed"], predicted["fetched"]) == (True, True) and dest.read_bytes() == renewed.earlier
    result = run_module(repository_key, options)
    assert (result["changed"], result["fetched"]) == (True, True) and dest.read_bytes() == renewed.binary
    assert result["expires"] == _gpg.utc(_gpg.read_key(renewed.binary).states[0].expires)
    again = run_module(repository_key, options)
    assert (again["changed"], again["fetched"]) == (False, False)


def test_an_installed_key_that_expired_with_no_renewal_at_the_source_is_refused(run_module, tmp_path, keys):
    expired = keys["expired"]
    dest = tmp_path / "etc" / "keyrings" / "test.gpg"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(expired.binary)
    (tmp_path / "expired.asc").write_bytes(expired.armored)
    for check_mode in (True, False):
        result = run_module(repository_key, args(tmp_path, keys, url="file://%s/expired.asc" % tmp_path, fingerprint=expired.fingerprint),
                            check_mode=check_mode)
        assert result["failed"] and "expired on 2020-12-31 00:00:00 UTC" in result["msg"] and dest.read_bytes() == expired.binary


@pytest.mark.parametrize("name", ["expired", "revoked"])
def test_the_check_only_call_refuses_an_installed_key_that_expired_or_was_revoked(run_module, tmp_path, keys, name):
    dest = tmp_path / "cuda.gpg"
    dest.write_bytes(keys[name].binary)
    result = run_module(repository_key, {"dest": str(dest), "fingerprint": keys[name].fingerprint})
    assert result["failed"] and result["msg"].startswith("the key %s at %s " % (keys[name].fingerprint, dest))
    assert ("expired on" if name == "expired" else "is revoked") in result["msg"] and result["msg"].endswith(". Nothing was installed.")


@pytest.mark.parametrize("warn_days, warns", [(None, True), (30, True), (11, True), (9, False), (0, False)])
def test_a_key_that_expires_soon_is_installed_with_a_warning(run_module, monkeypatch, tmp_path, keys, warn_days, warns):
    soon = keys["soon"]  # expires ten days after it was made, just now
    (tmp_path / "soon.asc").write_bytes(soon.armored)
    options = args(tmp_path, keys, url="file://%s/soon.asc" % tmp_path, fingerprint=soon.fingerprint)
    if warn_days is not None:
        options["expiry_warn_days"] = warn_days
    for check_mode in (True, False, False):  # predicted, installed, converged: each warns alike
        seen = _warnings(monkeypatch)
        result = run_module(repository_key, options, check_mode=check_mode)
        assert not result.get("failed") and result["expires"] == _gpg.utc(_gpg.read_key(soon.armored).states[0].expires)
        assert len(seen) == (1 if warns else 0), seen
        if warns:
            assert seen[0].startswith("the key %s at %s expires on %s, in " % (soon.fingerprint, options["dest"], result["expires"]))
    seen = _warnings(monkeypatch)
    check_only = {"dest": options["dest"], "fingerprint": soon.fingerprint}
    if warn_days is not None:
        check_only["expiry_warn_days"] = warn_days
    checked = run_module(repository_key, check_only)
    assert not checked.get("failed") and len(seen) == (1 if warns else 0)


@pytest.mark.parametrize("days", [-1, -30, 36501, 10 ** 9])
def test_expiry_warn_days_out_of_range_is_refused(run_module, tmp_path, keys, days):
    result = run_module(repository_key, args(tmp_path, keys, expiry_warn_days=days))
    assert result["failed"] and "expiry_warn_days: %d is not a number of days from 0 (never warn) to 36500" % days in result["msg"]
    assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("check_mode", [True, False])
@pytest.mark.parametrize("extra, message", [
    ({"mode": "0999"}, "mode: '0999' is not a file mode"),
    ({"mode": "rwxr-xr-x"}, "mode: 'rwxr-xr-x' is not a file mode"),
    ({"mode": "644\n"}, "mode: '644\\n' is not a file mode"),
    ({"mode": "$(reboot)"}, "mode: '$(reboot)' is not a file mode"),
    ({"mode": "u=rw;g=r"}, "is not a file mode"),
    ({"mode": "06444"}, "mode: '06444' is not a file mode"),
    ({"mode": "44"}, "mode: '44' is not a file mode"),
    ({"mode": ""}, "mode: '' is not a file mode"),
    ({"mode": 4096 * 8}, "mode: 32768 is not a file mode (0 to 0o7777)"),
    ({"mode": -1}, "mode: -1 is not a file mode"),
    ({"mode": 1.5}, "mode: 1.5 is a float, not a file mode"),
    ({"mode": ["0644"]}, "is a list, not a file mode"),
    # A key file whoever can write decides what the package manager trusts.
    ({"mode": "0666"}, "mode: '0666' lets the group or others replace the key"),
    ({"mode": "0664"}, "mode: '0664' lets the group or others replace the key"),
    ({"mode": "0646"}, "lets the group or others replace the key"),
    ({"mode": 0o777}, "mode: 511 lets the group or others replace the key"),
    ({"mode": "4644"}, "sets the setuid, setgid or sticky bit"),
    ({"mode": "1644"}, "sets the setuid, setgid or sticky bit"),
    ({"mode": "a+w"}, "mode: 'a+w' lets the group or others replace the key"),
    ({"mode": "o=rw"}, "lets the group or others"),
    ({"mode": "u=rw,g=u,o=r"}, "lets the group or others"),
    ({"mode": "+w"}, "lets the group or others"),
    ({"mode": "u+s"}, "sets the setuid, setgid or sticky bit"),
    ({"owner": "no-such-user-gpuhost"}, "owner: 'no-such-user-gpuhost' does not exist on this host"),
    ({"owner": "root\nX"}, "owner: 'root\\nX' is not a user or group name"),
    ({"owner": "$(reboot)"}, "owner: '$(reboot)' is not a user or group name"),
    ({"owner": "-root"}, "owner: '-root' is not a user or group name"),
    ({"owner": "99999999999"}, "owner: '99999999999' is not a valid numeric ID"),
    ({"group": "no-such-group-gpuhost"}, "group: 'no-such-group-gpuhost' does not exist on this host"),
    ({"group": "a b"}, "group: 'a b' is not a user or group name"),
    ({"group": "x" * 40}, "is not a user or group name"),
])
def test_mode_owner_and_group_are_checked_before_anything_is_written(run_module, tmp_path, keys, repo, check_mode, extra, message):
    before = snapshot(tmp_path)
    result = run_module(repository_key, args(tmp_path, keys, **extra), check_mode=check_mode)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert snapshot(tmp_path) == before and not (tmp_path / "etc").exists()


@pytest.mark.parametrize("extra", [{"mode": "0644"}, {"mode": "644"}, {"mode": "0444"}, {"mode": "0600"}, {"mode": 0o644},
                                   {"mode": "u=rw,g=r,o=r"}, {"mode": "u=rw,go=r"}, {"mode": "go-w"}, {"mode": None},
                                   {"owner": "0"}, {"group": "0"}])
def test_usual_modes_owners_and_groups_pass(run_module, tmp_path, keys, repo, extra):
    options = args(tmp_path, keys)
    options.update(extra)
    if options.get("mode") is None:
        options.pop("mode")
    assert not run_module(repository_key, options).get("failed")
