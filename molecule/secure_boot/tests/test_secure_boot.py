"""nvidia_driver's Machine Owner Key path on a Debian 12 host with Secure Boot on (a stand-in mokutil, see prepare.yml).

The key pair is real (openssl), the module package really installs through apt, and its stub postinst stands in for
DKMS's build: it records which signing key DKMS's configuration named when the package configured. A key named and
present there is the evidence that the role put the key and DKMS's signing configuration in place before the module
package installed.
"""

from __future__ import annotations

import json

import pytest

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

KEY = "/var/lib/dkms/mok.key"
CERT = "/var/lib/dkms/mok.pub"
SIGN_CONF = "/etc/dkms/framework.conf.d/gpuhost-nvidia-mok.conf"
BUILDS = "/var/lib/gpuhost-stub/nvidia-kernel-open-dkms.builds"
MOK = "/var/lib/gpuhost-stub/mok"


def test_the_key_pair_is_real_and_the_private_key_is_roots_alone(host):
    key = host.file(KEY)
    assert key.is_file and (key.user, key.group, key.mode) == ("root", "root", 0o600)
    check = host.run("openssl rsa -in %s -check -noout" % KEY)
    assert check.rc == 0 and "RSA key ok" in check.stdout, check
    cert = host.run("openssl x509 -inform DER -in %s -noout -subject -enddate" % CERT)
    # The common name fits X.509's 64 characters whatever the host's name (this one's is cut to 24).
    assert cert.rc == 0 and "CN = gpuhost.nvidia DKMS signing key (gpuhost-secure_boot-debi)" in cert.stdout, cert
    # The certificate is the private key's own.
    modulus = [host.run(cmd).stdout for cmd in ("openssl rsa -in %s -noout -modulus" % KEY,
                                                "openssl x509 -inform DER -in %s -noout -modulus" % CERT)]
    assert modulus[0] == modulus[1] and modulus[0].startswith("Modulus=")


def test_dkms_is_told_to_sign_with_the_key(host):
    conf = host.file(SIGN_CONF)
    assert conf.is_file and conf.mode == 0o644
    assert conf.content_string.splitlines()[1:] == ['mok_signing_key="%s"' % KEY, 'mok_certificate="%s"' % CERT]


def test_the_module_package_found_the_key_in_place_when_it_installed(host):
    assert host.package("nvidia-kernel-open-dkms").is_installed
    builds = host.file(BUILDS).content_string.splitlines()
    # One install (idempotence installed nothing again), and at that moment DKMS's configuration named the key, which existed.
    assert len(builds) == 1, builds
    assert builds[0].endswith(" mok_signing_key=%s mok_certificate=%s key_present=yes" % (KEY, CERT)), builds


def test_the_key_is_queued_for_enrolment_once(host):
    sha1 = host.run("openssl x509 -inform DER -in %s -noout -fingerprint -sha1" % CERT).stdout.strip().split("=", 1)[1].lower()
    assert host.file(MOK + "/new").content_string.split() == [sha1]
    imports = host.file(MOK + "/import.log").content_string.splitlines()
    assert imports == ["--import %s --root-pw" % CERT], imports  # the second run and check mode queued nothing again


def test_the_report_says_the_modules_are_signed_and_enrolment_is_pending(host):
    runs = [json.loads(line) for line in host.file("/root/secure_boot_runs.jsonl").content_string.splitlines()]
    real = [run for run in runs if not run["check_mode"]]
    assert len(real) >= 2
    for run in real:
        assert ("nvidia_driver: Secure Boot on, modules signed with %s; key enrolment pending (MokManager at the next boot)" % CERT
                in run["report"]), run["report"]
        assert "the module signing key is queued for enrolment: confirm it in MokManager at the next boot" in run["reboot_reasons"]


@pytest.mark.parametrize("path", [KEY, CERT, SIGN_CONF])
def test_nothing_else_owns_the_files(host, path):
    assert host.run("dpkg -S %s" % path).rc != 0
