"""Start and stop everything behind the API: the service, its state claim, the reconciler and the pod watch.

The order is the brief's lifespan order: discover the topology, load and
verify the checkpoint (claiming the state file, so ``recover-state`` cannot run
under a live enforcer), build the engine, reconcile every cgroup once (the
start-up divergence report), then start the reconcile worker and, in a
cluster, the pod watch.  :meth:`RunningNode.stop` undoes it in reverse.

Framework-free and synchronous: ``main``'s lifespan runs it in a worker thread.
"""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, field

from enforcer.cgroups import driver as cgdriver
from enforcer.errors import ConfigError
from enforcer.hooks import service as hooks
from enforcer.hooks.service import HookService
from enforcer.service import kube, kubelet_check, startup
from enforcer.service.cluster_status import ClusterStatus, KubernetesPodAnnotator
from enforcer.service.metrics import EnforcerMetrics
from enforcer.service.node_service import NodeService
from enforcer.service.nrt_publisher import NodeResourceTopologyPublisher
from enforcer.service.settings import EnforcerSettings
from enforcer.state import checkpoint, journal
from enforcer.state import errors as state_errors

log = logging.getLogger(__name__)


@dataclass
class RunningNode:
    service: NodeService
    claim: checkpoint.StateClaim
    watcher: kube.PodWatcher | None = None
    cluster_status: ClusterStatus | None = None
    hooks: HookService | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def stop(self) -> None:
        self._stop.set()
        if self.cluster_status is not None:
            self.cluster_status.poke()  # wake its loop so it sees the stop
        if self.hooks is not None:
            self.hooks.stop()
        self.service.reconciler.stop()
        for thread in self._threads:
            thread.join(timeout=2.0)  # a watch blocked on the API server ends with its window; it is a daemon
        self.claim.release()
        log.info("enforcer stopped", extra={"node": self.service.node_name})


def start(
    settings: EnforcerSettings,
    metrics: EnforcerMetrics,
    *,
    driver: cgdriver.CgroupDriver | None = None,
    pod_source: kube.PodSource | None = None,
    cluster_status: ClusterStatus | None = None,
) -> RunningNode:
    """Everything the API needs, running; raises ConfigError when the node cannot work as configured."""
    if settings.kubelet_config_check:
        kubelet_check.check(settings.kubelet_config_file, settings.node_config, cgroup_driver=settings.cgroup_driver)
    topology = startup.load_topology(settings)
    startup.check_state_dir(settings.state_path.parent)
    store = journal.JournaledStore(settings.state_path)
    try:
        claim = store.claim()
    except state_errors.CheckpointError as err:
        raise ConfigError(err.message) from None
    try:
        loaded = startup.load_state(store, topology, settings.node_config, identity=startup.current_identity(settings))
        if loaded.started_empty_after_state:
            metrics.state_started_empty.inc()
        service = NodeService(
            node_name=settings.node_name,
            topology=topology,
            config=settings.node_config,
            store=store,
            loaded=loaded,
            driver=driver if driver is not None else startup.cgroup_driver(settings),
            layout=startup.cgroup_layout(settings, topology),
            metrics=metrics,
        )
    except BaseException:
        claim.release()
        raise
    node = RunningNode(service, claim)
    service.reconciler.run_all("startup")
    service.reconciler.start(settings.reconcile_interval)
    if settings.hook_socket is not None:
        try:
            node.hooks = _start_hooks(settings, service, metrics)
        except BaseException:
            node.stop()
            raise
    if not settings.standalone:
        source = pod_source if pod_source is not None else _cluster_source(settings)
        node.watcher = kube.PodWatcher(
            service,
            source,
            grace_seconds=settings.release_grace_seconds,
            pod_level_resources=settings.node_config.gates.pod_level_resources,
            on_missing_allocations=lambda uids: metrics.allocations_missing.inc(len(uids)),
        )
        thread = threading.Thread(target=node.watcher.run, args=(node._stop,), name="pod-watch", daemon=True)
        thread.start()
        node._threads.append(thread)
        status = cluster_status or _cluster_status(settings, service)
        status_thread = threading.Thread(target=status.run, args=(node._stop,), name="cluster-status", daemon=True)
        status_thread.start()
        node._threads.append(status_thread)
        node.cluster_status = status
    freeze_startup_heap()
    log.info("enforcer started", extra=startup.describe(settings, topology))
    return node


def freeze_startup_heap() -> None:
    """Keep the start-up heap (modules, the app, the topology and restored state) out of full GC passes.

    A full collection scans every tracked object; on a 1,024-CPU node the start-up
    heap made each one a pause of ~100 ms on the request path, against ~1 ms frozen
    (``python -m bench.bench_enforcer --held-split 250 [--no-freeze]``, shared 2-core
    machine): the largest single cause of allocation p99 outliers at many pods held.  Frozen objects are still freed by
    reference counting; only cycles among them would wait for an ``unfreeze``.
    """
    gc.collect()
    gc.freeze()


def _start_hooks(settings: EnforcerSettings, service: NodeService, metrics: EnforcerMetrics) -> HookService:
    assert settings.hook_socket is not None
    try:
        return hooks.start(
            socket_path=settings.hook_socket,
            deadline=settings.hook_deadline,
            reconciler=service.reconciler,
            desired=service.desired_state,
            cgroup_version=settings.cgroup_version,
            registry=metrics.registry,
            watch_mode=settings.rewrite_watch,
            proc_root=settings.proc_root,
        )
    except OSError as err:
        raise ConfigError(f"hookSocket {settings.hook_socket}: {err.strerror or err}") from None


def _cluster_status(settings: EnforcerSettings, service: NodeService) -> ClusterStatus:
    """NodeResourceTopology and resize annotations; without API access the node still works, so log and skip."""
    documents: NodeResourceTopologyPublisher | None = None
    annotator: KubernetesPodAnnotator | None = None
    try:
        documents = NodeResourceTopologyPublisher.in_cluster(settings.node_name)
        annotator = KubernetesPodAnnotator()
    except Exception as err:  # kubernetes.config.ConfigException and friends, translated at the boundary
        log.warning("cluster status publishing is off", extra={"error": f"{type(err).__name__}: {err}"})
    return ClusterStatus(service, documents=documents, annotator=annotator)


def _cluster_source(settings: EnforcerSettings) -> kube.PodSource:
    try:
        return kube.KubernetesPodSource(settings.node_name)
    except Exception as err:  # kubernetes.config.ConfigException and friends, translated at the boundary
        raise ConfigError(
            f"cannot reach the Kubernetes API ({type(err).__name__}: {err}); outside a cluster run with --standalone"
        ) from None
