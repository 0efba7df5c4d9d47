"""docker-compose.yml and the Dockerfile: everything they name exists and fits together.

No Docker daemon is needed: the file is parsed, every host path it mounts must exist in the
repository, every command must be a ``numaguard`` subcommand, every file a service's config names
must be mounted into that service, and the enforcer URLs, ports, node names and certificate SANs
must agree.  Container paths under the image's fixture link map back to the package's sysfs trees.
"""

from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from cryptography import x509

from enforcer.engine import builder
from enforcer.engine import config as node_config
from enforcer.service import settings as enforcer_settings
from enforcer.topology import discovery
from numaguard_cli import certs as certs_command
from numaguard_cli.main import SUBCOMMANDS
from servicekit import certs
from webhook import discovery as enforcer_directory
from webhook import settings as webhook_settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = (REPO / "Dockerfile").read_text()
# The image links its bundled sysfs trees here (see the Dockerfile).
IMAGE_FIXTURES = "/opt/numaguard/sysfs-fixtures/"
REPO_FIXTURES = REPO / "enforcer" / "topology" / "fixtures"
ENFORCERS = ["enforcer-a", "enforcer-b"]


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def mounts(service: str) -> list[tuple[str, str]]:
    """(source, target) of each volume entry; sources starting with ./ are host paths."""
    out = []
    for entry in SERVICES[service].get("volumes", []):
        source, target, *_ = entry.split(":")
        out.append((source, target))
    return out


def container_file(service: str, path: str) -> Path | None:
    """The repository file a bind mount of ``service`` shows at container ``path``, if any."""
    for source, target in mounts(service):
        if source.startswith("./") and target == path:
            return REPO / source
    return None


def service_config(service: str) -> dict[str, Any]:
    path = container_file(service, option(SERVICES[service]["command"], "--config"))
    assert path is not None, f"{service}: its --config file is not bind-mounted"
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def etc_paths(value: Any) -> Iterator[str]:
    if isinstance(value, str) and value.startswith("/etc/numaguard/"):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from etc_paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from etc_paths(item)


def test_compose_file_parses_into_the_demo_services() -> None:
    assert set(SERVICES) == {"certs", "enforcer-a", "enforcer-b", "webhook"}
    named_volumes = {source for s in SERVICES for source, _ in mounts(s) if not source.startswith(".")}
    assert named_volumes <= set(COMPOSE["volumes"])


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_command_is_an_existing_numaguard_subcommand(service: str) -> None:
    command = SERVICES[service]["command"]
    assert command[0] == "numaguard"
    assert command[1] in SUBCOMMANDS


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_command_line_parses_with_its_subcommand_parser(service: str) -> None:
    command = SERVICES[service]["command"]
    try:
        module = importlib.import_module(SUBCOMMANDS[command[1]])
    except ModuleNotFoundError as err:
        pytest.skip(f"{SUBCOMMANDS[command[1]]} is not written yet: {err}")
    parser = argparse.ArgumentParser(prog=f"numaguard {command[1]}")
    module.add_arguments(parser)
    parser.parse_args(command[2:])


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_host_path_mounted_exists_in_the_repository(service: str) -> None:
    for source, _ in mounts(service):
        if source.startswith("./"):
            assert (REPO / source).is_file(), source


@pytest.mark.parametrize("service", ["enforcer-a", "enforcer-b", "webhook"])
def test_every_file_a_service_config_names_is_mounted_into_that_service(service: str) -> None:
    config = service_config(service)
    certificate_dirs = {target for source, target in mounts(service) if source == "certs"}
    for path in etc_paths(config):
        directory, _, name = path.rpartition("/")
        if directory in certificate_dirs:
            assert name in {n for pair in certs.BUNDLE_FILES.values() for n in pair}, path
        else:
            assert container_file(service, path) is not None, f"{service}: {path} is not mounted"


def test_certs_service_writes_the_bundle_into_the_volume_the_others_read() -> None:
    command = SERVICES["certs"]["command"]
    assert ("certs", option(command, "--out")) in mounts("certs")
    for service in ("enforcer-a", "enforcer-b", "webhook"):
        assert ("certs", "/etc/numaguard/tls") in mounts(service)
        assert SERVICES[service]["depends_on"]


@pytest.mark.parametrize("service", ENFORCERS)
def test_enforcers_read_bundled_sysfs_trees_that_exist_and_discover(service: str) -> None:
    command = SERVICES[service]["command"]
    root = option(command, "--sysfs-root")
    assert root.startswith(IMAGE_FIXTURES)
    assert "--dry-run-cgroups" in command
    tree = REPO_FIXTURES / root.removeprefix(IMAGE_FIXTURES)
    assert tree.is_dir()
    discovery.discover(tree)


def test_the_two_enforcers_run_different_topologies() -> None:
    trees = {option(SERVICES[s]["command"], "--sysfs-root") for s in ENFORCERS}
    assert len(trees) == 2
    shapes = {repr(discovery.discover(REPO_FIXTURES / t.removeprefix(IMAGE_FIXTURES))) for t in trees}
    assert len(shapes) == 2


@pytest.mark.parametrize("service", ENFORCERS)
def test_enforcer_config_and_flags_load_as_enforcer_settings(service: str) -> None:
    command = SERVICES[service]["command"]
    config = container_file(service, option(command, "--config"))
    assert config is not None
    flags = {
        "node_name": option(command, "--node-name"),
        "sysfs_root": REPO_FIXTURES / option(command, "--sysfs-root").removeprefix(IMAGE_FIXTURES),
        "dry_run_cgroups": "--dry-run-cgroups" in command,
        "standalone": "--standalone" in command,
    }
    loaded = enforcer_settings.load(config, env={}, overrides=flags)
    assert loaded.dry_run_cgroups and loaded.standalone  # no cgroups to write, no cluster to watch
    assert (loaded.tls_cert, loaded.tls_key, loaded.client_ca) == (
        Path("/etc/numaguard/tls/enforcer.crt"),
        Path("/etc/numaguard/tls/enforcer.key"),
        Path("/etc/numaguard/tls/ca.crt"),
    )


@pytest.mark.parametrize("service", ENFORCERS)
def test_enforcer_kubelet_configuration_builds_on_its_own_topology(service: str) -> None:
    root = option(SERVICES[service]["command"], "--sysfs-root")
    topology = discovery.discover(REPO_FIXTURES / root.removeprefix(IMAGE_FIXTURES))
    builder.build(topology, node_config.from_kubelet(service_config(service)["kubelet"]))


def listen_port(config: dict[str, Any]) -> int:
    return int(str(config["listen"]).rpartition(":")[2])


def test_enforcers_listen_on_distinct_ports_that_are_published_and_health_checked() -> None:
    ports = {service: listen_port(service_config(service)) for service in ENFORCERS}
    assert len(set(ports.values())) == len(ENFORCERS)
    for service, port in ports.items():
        assert f"127.0.0.1:{port}:{port}" in SERVICES[service]["ports"]
        assert f"https://localhost:{port}/healthz" in " ".join(SERVICES[service]["healthcheck"]["test"])


def test_webhook_config_loads_and_points_at_both_enforcers() -> None:
    loaded = webhook_settings.load(container_file("webhook", "/etc/numaguard/webhook.yaml"), env={})
    assert loaded.enforcer_discovery == "static" and loaded.enforcers_file is not None
    enforcers_file = container_file("webhook", str(loaded.enforcers_file))
    assert enforcers_file is not None and enforcers_file.parent == REPO / "deploy" / "compose"
    directory = enforcer_directory.StaticDirectory.from_file(enforcers_file)
    for service in ENFORCERS:
        node = option(SERVICES[service]["command"], "--node-name")
        url = urlsplit(directory.url_for(node) or "")
        assert (url.hostname, url.port) == (service, listen_port(service_config(service)))


def test_enforcer_urls_are_names_on_the_certificate_the_certs_service_issues(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    certs_command.add_arguments(parser)
    args = parser.parse_args(SERVICES["certs"]["command"][2:])
    bundle = certs.issue_bundle(tmp_path, namespace=args.namespace, enforcer_hosts=args.enforcer_host)
    enforcer = x509.load_pem_x509_certificate(bundle.cert("enforcer").read_bytes())
    names = enforcer.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(ENFORCERS) <= set(names.get_values_for_type(x509.DNSName))
    assert "localhost" in names.get_values_for_type(x509.DNSName)  # the health checks dial localhost


def test_services_run_as_the_image_user_without_privileges() -> None:
    for service in SERVICES.values():
        assert service["user"] == "10001:10001"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]


def test_dockerfile_installs_the_package_as_a_non_root_user() -> None:
    assert "pip install --no-deps /src" in DOCKERFILE
    users = [line.split()[1] for line in DOCKERFILE.splitlines() if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert IMAGE_FIXTURES.rstrip("/") in DOCKERFILE


def test_dockerfile_pins_the_base_image_by_digest() -> None:
    froms = [line.split()[1] for line in DOCKERFILE.splitlines() if line.startswith("FROM ")]
    assert froms == ["${PYTHON_BASE}"]
    (default,) = [line.split("=", 1)[1] for line in DOCKERFILE.splitlines() if line.startswith("ARG PYTHON_BASE=")]
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", default), default


def test_dockerfile_installs_dependencies_before_copying_the_source() -> None:
    """An edit to the source must not invalidate the dependency layer (Docker's layer cache)."""
    lines = [line.strip() for line in DOCKERFILE.splitlines()]
    copy_manifest = lines.index("COPY pyproject.toml /src/pyproject.toml")
    install_deps = next(i for i, line in enumerate(lines) if "pip install -r /tmp/requirements.txt" in line)
    copy_source = lines.index("COPY . /src")
    assert copy_manifest < install_deps < copy_source


def test_compose_builds_the_image_name_and_tag_the_manifests_deploy() -> None:
    kustomization = yaml.safe_load((REPO / "manifests" / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert image["newTag"] == version
    for service in SERVICES.values():
        assert service["image"] == f"{image['newName']}:{image['newTag']}"


def test_the_bundled_trees_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["enforcer.topology"]
    packaged = {p for pattern in patterns for p in REPO_FIXTURES.parent.glob(pattern) if p.is_file()}
    for service in ENFORCERS:
        tree = REPO_FIXTURES / option(SERVICES[service]["command"], "--sysfs-root").removeprefix(IMAGE_FIXTURES)
        assert {p for p in tree.rglob("*") if p.is_file()} <= packaged
