# gpuhost.nvidia developer entry point.
#   make test   every test tier (unit, sanity, lint, build, molecule); what CI runs
#   make rehearsal  .ci/run from a clean clone in a bare Debian 12 container (SCENARIOS="a b": fewer Molecule scenarios)
#   make demo   converge playbooks/site.yml on a Debian 12 systemd test container (hermetic: local signed mirror;
#               UPSTREAM=1: NVIDIA's real repositories) and print a summary
# Everything installs itself: the venv from requirements/dev.txt, the system packages of bindep.txt with apt.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
VBIN := $(VENV)/bin
SITE := $(shell $(PYTHON) -c 'import sys; print(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages")')
COLLECTION_LINK := $(VENV)/$(SITE)/ansible_collections/gpuhost/nvidia
export CONTAINERS_CONF := $(CURDIR)/tests/hosts/containers.conf
export PATH := $(CURDIR)/$(VBIN):$(PATH)
export ANSIBLE_PYTHON_INTERPRETER := auto_silent
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(VENV)/$(SITE)
ROLE ?=
DISTRO ?=
UPSTREAM ?= 0
SCENARIOS ?=

.PHONY: help venv venv218 deps images repos unit sanity sanity218 lint changelog-lint build molecule molecule218 test demo rehearsal gpu-bundle gpu clean ee ee-test

help:
	@sed -n '2,7p' Makefile

# --no-compile: pip would byte-compile all of the about 19,000 Python files it installs (15,000 of them the ansible
# package's collections), two thirds of the venv's build (101 s, 37 s without, on the 2-core machine with a warm pip
# cache); Python compiles the files the tiers import when they first import them.
$(VENV)/.stamp: requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VBIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(VBIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements/dev.txt
	touch $@

# The collection is linked into the venv's collection path, so FQCNs and ansible-doc work
# from a clean clone without Galaxy.
$(COLLECTION_LINK): $(VENV)/.stamp
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

venv: $(COLLECTION_LINK)

# A second venv on ansible-core 2.18 (not claimed by meta/runtime.yml until make molecule218 passes): requirements/dev.txt without its ansible and
# ansible-core pins, constrained by requirements/constraints-core218.txt. Under .cache (ignored by git, the build,
# ansible-lint and yamllint). Use it with GPUHOST_VENV=$(VENV218): tests/sanity/run.sh and tests/molecule/run.sh
# put its bin/ first on PATH and its collections (the `ansible` package's, plus this checkout) on the collection path.
VENV218 := .cache/venv-core218
$(VENV218)/.stamp: requirements/dev.txt requirements/constraints-core218.txt
	$(PYTHON) -m venv $(VENV218)
	$(VENV218)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	grep -Ev '^ansible(-core)?==' requirements/dev.txt >$(VENV218)/requirements.txt
	$(VENV218)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r $(VENV218)/requirements.txt -c requirements/constraints-core218.txt ansible-core ansible
	$(VENV218)/bin/python -m pip freeze | grep -E '^ansible(-core|-lint)?==|^molecule==' >$(VENV218)/resolved.txt
	mkdir -p $(VENV218)/$(SITE)/ansible_collections/gpuhost
	ln -sfn $(CURDIR) $(VENV218)/$(SITE)/ansible_collections/gpuhost/nvidia
	touch $@

venv218: $(VENV218)/.stamp
	@cat $(VENV218)/resolved.txt

# System packages the tiers need, by package name from one list (bindep.txt), installed with apt.
deps:
	tests/deps/install.sh

images: deps
	tests/hosts/build.sh debian12 debian13 rocky9 rocky10 arch ubuntu2204 ubuntu2404

# Local signed apt/rpm/pacman repositories of stub packages (.cache/repos/current).
repos: venv deps
	$(VBIN)/python tests/repos/build.py

unit: venv deps
	$(VBIN)/python -m pytest tests/unit -q -p no:cacheprovider -rs --durations=30

sanity: venv deps
	tests/sanity/run.sh

# The same sanity tests with ansible-core 2.18's ansible-test (make venv218); on demand, not in make test.
sanity218: venv218 deps
	GPUHOST_VENV=$(VENV218) GPUHOST_SANITY_STAGE=$${TMPDIR:-/tmp}/gpuhost-sanity-core218 tests/sanity/run.sh

lint: venv
	$(VBIN)/ansible-lint
	$(VBIN)/yamllint --strict .

changelog-lint: venv
	$(VBIN)/antsibull-changelog lint

# Build the release tarball, install it into an empty path and list its plugins from there.
build: venv
	tests/build/check.sh

# Only the images the chosen scenarios run on (without ROLE or MOLECULE_SCENARIOS: those of the scenarios run.sh then
# runs, the on-demand ones left out unless GPUHOST_MOLECULE_ALL=1).
molecule: venv deps repos
	tests/hosts/build.sh $$($(VBIN)/python tests/molecule/images.py $(or $(ROLE),$(MOLECULE_SCENARIOS)))
	tests/molecule/run.sh $(ROLE) $(DISTRO)

# On demand (about 10 minutes, too long for CI beside the 2.19 scenarios): molecule site on Debian 12 with ansible-core
# 2.18. It must pass before meta/runtime.yml claims 2.18 again (its idempotence run fails today).
molecule218: venv218 deps repos
	tests/hosts/build.sh debian12
	GPUHOST_VENV=$(VENV218) tests/molecule/run.sh site debian12

test: venv deps
	tests/run_tiers.sh

# CI on a brand-new machine: .ci/run from a clean clone of HEAD in a bare Debian 12 container (nested podman).
# SCENARIOS="a b" limits the Molecule scenarios (the summary names the ones left out).
rehearsal: deps
	SCENARIOS="$(SCENARIOS)" tests/rehearsal/run.sh

demo: venv deps repos
	tests/hosts/build.sh debian12
	UPSTREAM=$(UPSTREAM) tests/demo/run.sh

# The execution environment (docs/awx.md): `make ee` builds localhost/gpuhost-nvidia-ee:latest here without Galaxy or
# a registry; `make ee-test` also converges test hosts with it through ansible-navigator and ansible-runner (on demand).
ee: venv deps
	ee/build.sh

ee-test: venv deps repos
	tests/ee/run.sh

# The GPU tier (tests/gpu/README.md): gpu-bundle prepares wheels + tarball for a machine without network;
# `make gpu OUT=DIR` runs the read-only tier on this machine's NVIDIA GPUs from that bundle.
gpu-bundle: venv
	tests/gpu/bundle.sh

gpu:
	tests/gpu/run.sh $(or $(OUT),tests/output/gpu)

clean:
	rm -rf $(VENV) .cache tests/output gpuhost-nvidia-*.tar.gz
