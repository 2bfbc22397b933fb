"""Build the local, signed package repositories the test hosts install from.

    python3 tests/repos/build.py [--out DIR]

Reads tests/repos/packages.yml and writes, under DIR (default .cache/repos/<content key>,
linked as .cache/repos/current):

    key/        a throwaway test signing key: gnupg home, public key (armored and binary),
                and `fingerprint`, which tests pass to the roles as their pinned fingerprint
    rogue/      a second key that signs nothing here: the "unpinned key" case
    apt/        flat apt repository (Packages, Release, InRelease, Release.gpg)
    rpm/<repo>/ rpm repositories: rpms signed with rpmsign, repodata by createrepo_c,
                modules.yaml for `dnf module`, repomd.xml.asc for repo_gpgcheck
    pacman/     pacman repository `gpuhost-test`: packages with detached signatures, a
                signed database built by repo-add
    tampered/   a copy of the apt, one rpm and the pacman repository in which one package's
                payload was altered after signing (metadata and signatures untouched)

A build whose key already exists is reused. Needs: gpg, dpkg-deb, apt-ftparchive, rpmbuild,
rpmsign, createrepo_c, modifyrepo_c, bsdtar, zstd, repo-add (tests/repos/README.md).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FILE_DEST = {
    "nvidia-ctk": "usr/bin/nvidia-ctk",
    "nvidia-container-runtime": "usr/bin/nvidia-container-runtime",
    "nvidia-smi": "usr/bin/nvidia-smi",
    "nvidia-persistenced": "usr/bin/nvidia-persistenced",
    "nvidia-persistenced.service": "usr/lib/systemd/system/nvidia-persistenced.service",
    # Ubuntu (#24): the unit of nvidia-compute-utils-<branch>[-server], where Ubuntu's packaging puts it
    "nvidia-persistenced.service.ubuntu": "lib/systemd/system/nvidia-persistenced.service",
    "nvidia-fabricmanager.service": "usr/lib/systemd/system/nvidia-fabricmanager.service",
    # nvidia_driver (#17): the apt preferences of the stand-in for NVIDIA's pinning package
    "nvidia-driver-pinning-595": "etc/apt/preferences.d/nvidia-driver-pinning-595",
    # gpu_exporter (#22): DCGM's host engine and exporter, nvidia_gpu_exporter's release tarball (top-level binary)
    "dcgm-exporter": "usr/bin/dcgm-exporter",
    "nv-hostengine": "usr/bin/nv-hostengine",
    "nvidia-dcgm.service": "usr/lib/systemd/system/nvidia-dcgm.service",
    "nvidia_gpu_exporter": "nvidia_gpu_exporter",
    # nvidia_container_toolkit (#18): toolkit 1.18.0's CDI refresh units and their environment file (where 1.18.0's
    # packaging/debian/nvidia-container-toolkit-base.install puts them)
    "nvidia-cdi-refresh.path": "etc/systemd/system/nvidia-cdi-refresh.path",
    "nvidia-cdi-refresh.service": "etc/systemd/system/nvidia-cdi-refresh.service",
    "nvidia-cdi-refresh.env": "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env",
}
KEY_UID = "gpuhost.nvidia test repositories (throwaway key, tests only) <test@gpuhost.invalid>"


def run(cmd: list[str], **kw) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def content_key() -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in HERE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(HERE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def expand(spec: dict, tk: str | None) -> dict:
    """Fill {tk} (toolkit version) into every string of a package spec."""
    def fill(value):
        if isinstance(value, str):
            return value.replace("{tk}", tk or "")
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value
    return {k: fill(v) for k, v in spec.items()}


def packages(specs: list[dict], toolkit_versions: list[str]) -> list[dict]:
    out = []
    for spec in specs:
        versions = toolkit_versions if any("{tk}" in str(v) for v in spec.values()) else [None]
        out.extend(expand(spec, tk) for tk in versions)
    return out


def driver_versions(specs: list[dict], versions: list[str]) -> list[dict]:
    """Each spec that holds {drv} once per driver version (filled in); the others once, as they are."""
    def fill(value, drv):
        if isinstance(value, str):
            return value.replace("{drv}", drv)
        if isinstance(value, list):
            return [fill(v, drv) for v in value]
        return value
    out = []
    for spec in specs:
        drvs = versions if "{drv}" in str(spec) else [""]
        out.extend({k: fill(v, drv) for k, v in spec.items()} for drv in drvs)
    return out


def stub_text(name: str, version: str) -> str:
    """One stand-in file as a package installs it: its version filled in and, for the stub exporters, the published
    metric and label names of vocabulary/<name>.json embedded (the one place the tests and the stubs read them from)."""
    text = (HERE / "files" / name).read_text().replace("@VERSION@", version.split(":")[-1].split("-")[0])
    vocabulary = HERE / "vocabulary" / f"{name}.json"
    if "@VOCABULARY@" in text:
        text = text.replace("@VOCABULARY@", base64.b64encode(vocabulary.read_bytes()).decode())
    return text


def stage_files(root: Path, spec: dict) -> None:
    """The stand-in files of one package, under root."""
    marker = root / "usr/share/gpuhost-stub" / spec["name"] / "STUB"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"Stand-in for {spec['name']} {spec['version']}, built by gpuhost.nvidia tests/repos/build.py.\n"
                      "It is not NVIDIA's package and contains no NVIDIA software.\n")
    names = list(spec.get("files", []))
    # files_since: files a package gained at a version (the toolkit's nvidia-cdi-refresh units, 1.18.0)
    for since, extra in spec.get("files_since", {}).items():
        if tuple(map(int, spec["version"].split("-")[0].split("."))) >= tuple(map(int, since.split("."))):
            names += extra
    for name in names:
        dest = root / FILE_DEST[name]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(stub_text(name, spec["version"]))
        dest.chmod(0o755 if "/bin/" in FILE_DEST[name] or "/" not in FILE_DEST[name] else 0o644)


# --- keys -------------------------------------------------------------------------------

def make_key(home: Path, uid: str) -> str:
    home.mkdir(parents=True, mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-generate-key", uid, "rsa3072", "sign", "never"], env=env)
    fpr = [line.split(":")[9] for line in run(["gpg", "--with-colons", "--list-keys"], env=env).splitlines() if line.startswith("fpr:")][0]
    (home.parent / "public.asc").write_text(run(["gpg", "--armor", "--export", fpr], env=env))
    subprocess.run(["gpg", "--export", fpr], env=env, check=True, stdout=(home.parent / "public.gpg").open("wb"))
    (home.parent / "fingerprint").write_text(fpr + "\n")
    return fpr


def gpg(home: Path, *args: str) -> None:
    run(["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "", *args], env={**os.environ, "GNUPGHOME": str(home)})


# --- apt --------------------------------------------------------------------------------

def build_apt(out: Path, specs: list[dict], home: Path, fpr: str) -> None:
    out.mkdir(parents=True)
    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "pkg"
            stage_files(root, spec)
            (root / "DEBIAN").mkdir()
            control = [f"Package: {spec['name']}", f"Version: {spec['version']}", "Architecture: amd64",
                       "Maintainer: gpuhost.nvidia tests <test@gpuhost.invalid>",
                       f"Description: STUB stand-in for {spec['name']} (gpuhost.nvidia tests)"]
            if spec.get("depends"):
                control.insert(3, f"Depends: {spec['depends']}")
            (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
            if spec.get("postinst"):
                # A maintainer script of the stub's own (files/): where the real package does its work at install time.
                script = root / "DEBIAN/postinst"
                script.write_text((HERE / "files" / spec["postinst"]).read_text())
                script.chmod(0o755)
            # The file name without the epoch, as in a Debian pool (1:4.5.2-1 -> _4.5.2-1_)
            deb = f"{spec['name']}_{spec['version'].split(':')[-1]}_amd64.deb"
            run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out / deb)])
    (out / "Packages").write_text(run(["apt-ftparchive", "packages", "."], cwd=out))
    run(["gzip", "-kn9", "Packages"], cwd=out)
    (out / "Release").write_text(run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=gpuhost-test",
                                      "-o", "APT::FTPArchive::Release::Label=gpuhost-test", "release", "."], cwd=out))
    gpg(home, "--local-user", fpr, "--clearsign", "--output", str(out / "InRelease"), str(out / "Release"))
    gpg(home, "--local-user", fpr, "--armor", "--detach-sign", "--output", str(out / "Release.gpg"), str(out / "Release"))


# --- rpm --------------------------------------------------------------------------------

def build_rpms(out: Path, specs: list[dict], home: Path, fpr: str) -> list[dict]:
    out.mkdir(parents=True)
    built = []
    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            top = Path(tmp)
            root = top / "root"
            stage_files(root, spec)
            files = sorted("/" + p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
            lines = [f"Name: {spec['name']}", f"Version: {spec['version']}", f"Release: {spec['release']}",
                     "Summary: STUB stand-in (gpuhost.nvidia tests)", "License: GPL-3.0-or-later", "BuildArch: x86_64",
                     "AutoReqProv: no"]
            if spec.get("epoch"):
                lines.append(f"Epoch: {spec['epoch']}")
            lines += [f"Requires: {req}" for req in spec.get("requires", [])]
            lines += ["%description", f"Stand-in for {spec['name']}; contains no NVIDIA software.",
                      "%install", f"cp -a {root}/. %{{buildroot}}/", "%files"] + files
            (top / "pkg.spec").write_text("\n".join(lines) + "\n")
            run(["rpmbuild", "-bb", "--define", f"_topdir {top}", "--define", "_build_id_links none",
                 "--define", "__os_install_post %{nil}", str(top / "pkg.spec")])
            for rpm in (top / "RPMS").rglob("*.rpm"):
                shutil.move(str(rpm), out / rpm.name)
        built.append(spec)
    rpms = sorted(str(p) for p in out.glob("*.rpm"))
    run(["rpmsign", "--define", f"_gpg_path {home}", "--define", f"_gpg_name {fpr}", "--define", f"__gpg {shutil.which('gpg')}",
         "--define", "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase ''", "--addsign", *rpms])
    return built


def build_rpm_repo(out: Path, specs: list[dict], home: Path, fpr: str, modules: dict | None = None) -> None:
    built = build_rpms(out, specs, home, fpr)
    run(["createrepo_c", "--quiet", str(out)])
    if modules:
        docs = []
        for module, streams in modules.items():
            for stream, names in streams.items():
                # A branch stream (570-open) holds only that branch's builds; open-dkms, latest-dkms hold every branch.
                branch = stream.split("-")[0] + "." if stream[:3].isdigit() else ""
                artifacts = [f"{s['name']}-{s.get('epoch', 0)}:{s['version']}-{s['release']}.x86_64"
                             for s in built if s["name"] in names and s["version"].startswith(branch)]
                docs.append({"document": "modulemd", "version": 2, "data": {
                    "name": module, "stream": stream, "version": 1, "context": "gpuhost0", "arch": "x86_64",
                    "summary": f"{module} {stream} (gpuhost stub)", "description": "Stub module stream for tests.",
                    "license": {"module": ["MIT"]},
                    "profiles": {"default": {"rpms": sorted(names)}},
                    "artifacts": {"rpms": sorted(artifacts)}}})
            docs.append({"document": "modulemd-defaults", "version": 1, "data": {"module": module, "profiles": {}}})
        modules_yaml = out / "modules.yaml"
        modules_yaml.write_text(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True))
        run(["modifyrepo_c", "--mdtype=modules", str(modules_yaml), str(out / "repodata")])
        modules_yaml.unlink()
    gpg(home, "--local-user", fpr, "--armor", "--detach-sign", "--output", str(out / "repodata/repomd.xml.asc"), str(out / "repodata/repomd.xml"))


# --- pacman -----------------------------------------------------------------------------

def build_pacman(out: Path, specs: list[dict], home: Path, fpr: str) -> None:
    out.mkdir(parents=True)
    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            stage_files(root, spec)
            size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
            info = [f"pkgname = {spec['name']}", f"pkgbase = {spec['name']}", f"pkgver = {spec['version']}",
                    f"pkgdesc = STUB stand-in for {spec['name']} (gpuhost.nvidia tests)", "url = https://gpuhost.invalid/",
                    f"builddate = {int(time.time())}", "packager = gpuhost.nvidia tests <test@gpuhost.invalid>",
                    f"size = {size}", "arch = x86_64", "license = GPL-3.0-or-later"]
            info += [f"group = {group}" for group in spec.get("groups", [])]
            info += [f"depend = {dep}" for dep in spec.get("depends", [])]
            (root / ".PKGINFO").write_text("\n".join(info) + "\n")
            pkg = out / f"{spec['name']}-{spec['version']}-x86_64.pkg.tar.zst"
            entries = [".PKGINFO"] + sorted(p.name for p in root.iterdir() if p.name != ".PKGINFO")
            run(["bsdtar", "--uid", "0", "--gid", "0", "--zstd", "-cf", str(pkg), *entries], cwd=root)
        gpg(home, "--local-user", fpr, "--detach-sign", "--output", f"{pkg}.sig", str(pkg))
    pkgs = sorted(str(p) for p in out.glob("*.pkg.tar.zst"))
    run(["repo-add", "--quiet", "--sign", "--key", fpr, str(out / "gpuhost-test.db.tar.gz"), *pkgs],
        env={**os.environ, "GNUPGHOME": str(home)})


def build_tarballs(out: Path, specs: list[dict]) -> None:
    """Release tarballs (like a GitHub release: the binary at the top level) and their checksums.txt."""
    out.mkdir(parents=True)
    sums = []
    for spec in specs:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            stage_files(root, spec)
            name = f"{spec['name']}_{spec['version']}_linux_x86_64.tar.gz"
            run(["tar", "--owner=0", "--group=0", "--mtime=@0", "-czf", str(out / name), "-C", str(root), *sorted(x.name for x in root.iterdir())])
            sums.append(f"{hashlib.sha256((out / name).read_bytes()).hexdigest()}  {name}")
    (out / "checksums.txt").write_text("\n".join(sums) + "\n")


def tampered_copy(repo: Path, dest: Path, victim_glob: str) -> None:
    """Copy a signed repository, then flip bytes in one package's payload.

    The metadata and its signature stay as signed, so only the package no longer matches:
    what a corrupted mirror or a swapped file looks like to the package manager.
    """
    shutil.copytree(repo, dest)
    victim = sorted(dest.glob(victim_glob))[0]
    data = bytearray(victim.read_bytes())
    for offset in range(len(data) - 64, len(data) - 32):
        data[offset] ^= 0xFF
    victim.write_bytes(bytes(data))


def build(out: Path) -> None:
    manifest = yaml.safe_load((HERE / "packages.yml").read_text())
    tk = manifest["toolkit_versions"]
    fpr = make_key(out / "key" / "gnupg", KEY_UID)
    make_key(out / "rogue" / "gnupg", "rogue key that signs nothing (gpuhost.nvidia tests) <rogue@gpuhost.invalid>")
    home = out / "key" / "gnupg"
    # apt_toolkit_versions: the apt repository also offers a current toolkit (#18), without moving rpm's newest
    build_apt(out / "apt", packages(manifest["apt"], manifest.get("apt_toolkit_versions", tk)), home, fpr)
    dcgm = manifest.get("apt-cuda-dcgm", [])  # DCGM in NVIDIA's debian13 and ubuntu2204 repositories
    build_apt(out / "apt-cuda-debian13", driver_versions(manifest["apt-cuda-debian13"], manifest["apt-cuda-debian13-versions"]) + dcgm,
              home, fpr)
    # #20: NVIDIA's debian12 repository, the same stubs at two releases of one branch
    debian12 = manifest["apt-cuda-debian13"] + manifest.get("apt-cuda-debian12-extra", [])
    build_apt(out / "apt-cuda-debian12", driver_versions(debian12, manifest["apt-cuda-debian12-versions"]), home, fpr)
    # Ubuntu (#24): the noble archive's restricted NVIDIA packages and NVIDIA's CUDA ubuntu2204 repository
    build_apt(out / "apt-ubuntu-noble", manifest["apt-ubuntu-noble"], home, fpr)
    build_apt(out / "apt-cuda-ubuntu2204", manifest["apt-cuda-ubuntu2204"] + dcgm, home, fpr)
    rpm = manifest["rpm"]
    build_rpm_repo(out / "rpm" / "libnvidia-container", packages(rpm["libnvidia-container"], manifest.get("rpm_toolkit_versions", tk)),
                   home, fpr)
    build_rpm_repo(out / "rpm" / "cuda-rhel9", driver_versions(rpm["cuda-rhel9"], rpm["cuda-rhel9-versions"]), home, fpr, rpm.get("modules"))
    build_rpm_repo(out / "rpm" / "cuda-rhel10", driver_versions(rpm["cuda-rhel10"], rpm["cuda-rhel10-versions"]), home, fpr)
    build_rpm_repo(out / "rpm" / "baseos-el10", rpm["baseos-el10"], home, fpr)
    build_pacman(out / "pacman", packages(manifest["pacman"], tk), home, fpr)
    build_pacman(out / "pacman-590", manifest["pacman-590"], home, fpr)  # #20: one branch later
    build_tarballs(out / "tarballs", manifest.get("tarballs", []))
    tampered_copy(out / "apt", out / "tampered" / "apt", "libnvidia-container1_1.18.0-1_*.deb")
    tampered_copy(out / "rpm" / "libnvidia-container", out / "tampered" / "rpm", "libnvidia-container1-1.18.0-1.*.rpm")
    tampered_copy(out / "pacman", out / "tampered" / "pacman", "libnvidia-container-1.17.8-1-*.pkg.tar.zst")
    # Only the public parts travel into the test hosts; the gnupg homes stay behind.
    for home_dir in (out / "key" / "gnupg", out / "rogue" / "gnupg"):
        subprocess.run(["gpgconf", "--homedir", str(home_dir), "--kill", "all"], check=False, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    base = REPO / ".cache" / "repos"
    out = args.out or base / content_key()
    if (out / "pacman" / "gpuhost-test.db").exists():
        print(f"[repos] reusing {out}", file=sys.stderr)
    else:
        if out.exists():
            shutil.rmtree(out)
        start = time.monotonic()
        tmp_out = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp_out, ignore_errors=True)
        build(tmp_out)
        tmp_out.rename(out)
        print(f"[repos] built {out} in {time.monotonic() - start:.0f} s", file=sys.stderr)
    if args.out is None:
        current = base / "current"
        if current.is_symlink() or current.exists():
            current.unlink()
        current.symlink_to(out.name)
        for stale in base.iterdir():  # earlier builds: keep only the current one
            if stale.is_dir() and not stale.is_symlink() and stale.name != out.name:
                shutil.rmtree(stale)
    print(out)


if __name__ == "__main__":
    main()
