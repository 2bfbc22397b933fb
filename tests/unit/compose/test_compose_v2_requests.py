# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A GPU request the project's own compose file already makes, against the override, under a real Docker Compose v2
(Debian 13's 2.26.1, unpacked by tests/deps/install.sh): both request forms (deploy.resources.reservations.devices and
the service-level gpus attribute), base_requests=replace's !override/!reset, and the widening base_requests=refuse
stops. One ``docker compose config`` run per base file, every case's services in it."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose as c

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
COMPOSE = os.path.join(REPO, ".cache", "tools", "trixie", "usr", "libexec", "docker", "cli-plugins", "docker-compose")

# What a project's compose file may already give a service: nothing, or GPUs in either form.
BASES = {
    "none": {},
    "gpus_all": {"gpus": "all"},
    "gpus_list": {"gpus": [{"driver": "nvidia", "count": "all"}]},
    "deploy_all": {"deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", "count": "all",
                                                                          "capabilities": ["gpu"]}]}}}},
    "deploy_with_limits": {"deploy": {"resources": {"limits": {"cpus": "2"},
                                                    "reservations": {"devices": [{"driver": "nvidia",
                                                                                  "device_ids": ["1"],
                                                                                  "capabilities": ["gpu"]}]}}}},
}
FORMS = c.REQUEST_FORMS
POLICIES = c.BASE_REQUEST_POLICIES


def _name(base: str, form: str, policy: str) -> str:
    return "%s-%s-%s" % (base.replace("_", "-"), form, policy)


def _devices(service: dict) -> list[dict]:
    """The device requests of a service in ``docker compose config --format json``, each as a comparable mapping."""
    found = []
    for request in (service.get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices") or []:
        found.append(request)
    for request in service.get("gpus") or []:
        found.append(request)
    return sorted((json.dumps(r, sort_keys=True) for r in found))


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """Every (base, form, policy) case as one service in one project, merged by the real Compose v2."""
    if not os.access(COMPOSE, os.X_OK):
        pytest.skip("tool missing: Docker Compose v2 at %s (bindep.txt trixie-extract; tests/deps/install.sh)" % COMPOSE)
    directory = tmp_path_factory.mktemp("project")
    base_services = {}
    request_services = {}
    plans = {}
    for base, extra in BASES.items():
        for form in FORMS:
            for policy in POLICIES:
                name = _name(base, form, policy)
                base_services[name] = dict({"image": "busybox"}, **extra)
                plan = c.build({"services": [{"name": name, "device_ids": ["0"]}], "request_form": form,
                                "base_requests": policy}, None)
                request_services.update(plan.services)
                plans[name] = plan
    (directory / "compose.yml").write_text(yaml.safe_dump({"services": base_services}), encoding="utf-8")
    override = c.render(c.merge(None, request_services))
    (directory / "docker-compose.gpu.yml").write_text(override, encoding="utf-8")
    out = subprocess.run([COMPOSE, "--project-directory", str(directory), "-f", str(directory / "compose.yml"),
                          "-f", str(directory / "docker-compose.gpu.yml"), "config", "--format", "json"],
                         capture_output=True, text=True, check=False, env=dict(os.environ, LC_ALL="C"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["services"], override, plans


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("base", sorted(BASES))
def test_replace_leaves_exactly_the_overrides_request_whatever_the_base_holds(merged, base, form):
    services, _override, _plans = merged
    service = services[_name(base, form, "replace")]
    assert len(_devices(service)) == 1, service
    request = json.loads(_devices(service)[0])
    assert request["device_ids"] == ["0"] and request["driver"] == "nvidia"
    # the form the override chose holds it; the other one is gone
    other = "deploy" if form == "gpus" else "gpus"
    if other == "gpus":
        assert not service.get("gpus"), service
    else:
        assert not (service.get("deploy") or {}).get("resources", {}).get("reservations", {}).get("devices"), service
    if base == "deploy_with_limits":  # the reset takes the devices only: the base's limits stay
        assert service["deploy"]["resources"]["limits"]["cpus"] in ("2", 2.0, 2)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("base", sorted(BASES))
def test_without_tags_a_base_request_widens_the_service_so_refuse_names_it(merged, base, form):
    """The control: the plain override (what refuse writes) next to a base request gives the service both requests,
    which is why refuse stops before writing; a base without a request gets exactly the override's."""
    services, _override, plans = merged
    name = _name(base, form, "refuse")
    widened = len(_devices(services[name])) > 1
    errors = c.base_request_errors([("compose.yml", {"services": {name: BASES[base]}})], plans[name].services)
    assert widened == (base != "none")
    assert bool(errors) == widened, errors
    if errors:
        assert name in errors[0] and "compose.yml" in errors[0] and "base_requests: replace" in errors[0]


def test_the_tagged_override_reads_back_equal_and_plain_yaml_loses_nothing_else(merged):
    _services, override, _plans = merged
    document = c.parse(override)
    assert c.render(document) == override
    assert "!override" in override and "!reset []" in override
    # a reader that does not know the tags still sees the same structure underneath
    assert c.plain(document) == yaml.load(override.replace("!override", "").replace("!reset", ""), Loader=yaml.SafeLoader)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("form", FORMS)
def test_every_form_and_policy_is_a_valid_compose_document(compose_validator, form, policy):
    """The compose specification's schema, on what a reader sees under the tags (the schema has no tags)."""
    plan = c.build({"services": [{"name": "app", "count": 2}, {"name": "cdi", "driver": "cdi"}],
                    "request_form": form, "base_requests": policy}, None)
    document = c.plain(c.parse(c.render(c.merge(None, plan.services))))
    for service in document["services"].values():
        service["image"] = "busybox"
    errors = sorted(str(e.message) for e in compose_validator.iter_errors(document))
    assert errors == []


@pytest.mark.parametrize("bad", [{"request_form": "short"}, {"base_requests": "merge"}, {"request_form": None, "base_requests": 1}])
def test_unknown_forms_and_policies_are_refused_by_name(bad):
    request = dict({"services": [{"name": "app"}]}, **bad)
    errors = c.request_errors(request)
    if bad.get("request_form") is None and bad.get("base_requests") == 1:
        assert any("base_requests 1" in e for e in errors), errors
    else:
        assert any(repr(next(iter(bad.values()))) in e for e in errors), errors
