"""Composition root: settings -> directory, replica store, poller, decisions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from extender import main, poller
from extender.decide import Extender
from extender.directory import EnforcerDirectory, PodDirectory
from extender.replica import ReplicaStore
from extender.settings import ExtenderSettings


def _token_reader(path: Path | None) -> Callable[[], str | None] | None:
    if path is None:
        return None

    def read() -> str | None:
        try:
            return path.read_text().strip() or None
        except OSError:
            return None

    return read


def _pod_lister(settings: ExtenderSettings, directory: PodDirectory) -> Callable[[], None]:
    """daemonset discovery: list the enforcer pods (the pod's service account: get/list pods in that namespace)."""
    from kubernetes import client, config

    config.load_incluster_config()
    core = client.CoreV1Api()

    def discover() -> None:
        listed = core.list_namespaced_pod(
            settings.enforcer_namespace, label_selector=settings.enforcer_selector, _preload_content=False
        )
        directory.replace_all(json.loads(listed.data).get("items") or [])

    return discover


def assemble(settings: ExtenderSettings) -> main.Components:
    directory: EnforcerDirectory
    discover = None
    if settings.enforcer_discovery == "daemonset":
        pods = PodDirectory(settings.enforcer_port)
        discover = _pod_lister(settings, pods)
        directory = pods
    else:
        assert settings.enforcers_file is not None
        directory = EnforcerDirectory.load(settings.enforcers_file)
    store = ReplicaStore(freshness=settings.freshness_seconds)
    client = poller.client_factory(
        ca=None if settings.enforcer_ca is None else str(settings.enforcer_ca),
        cert=None if settings.client_cert is None else str(settings.client_cert),
        key=None if settings.client_key is None else str(settings.client_key),
        token=_token_reader(settings.token_file),
        timeout=settings.poll_timeout_seconds,
    )
    the_poller = poller.Poller(
        store,
        directory,
        client,
        interval=settings.poll_interval_seconds,
        workers=settings.poll_workers,
        server_name=settings.enforcer_server_name,
        discover=discover,
        discover_every=settings.discovery_interval_seconds,
    )
    extender = Extender(store, directory, enforcer_down=settings.enforcer_down, on_new_node=the_poller.request)
    return main.Components(extender=extender, poller=the_poller)
