"""``numaguard enforcer``: run the per-node enforcer over mutual TLS.

Settings come from ``--config`` (YAML/JSON; its ``node:`` section has the shape
of a scenario file's), the environment (``NUMAGUARD_ENFORCER_<FIELD>``) and the
flags below, later sources winning (:mod:`enforcer.service.settings`).  The
enforcer serves only over TLS and verifies client certificates against
``--client-ca``.  Outside a cluster it needs ``--standalone`` (no pod watch:
allocations are released by ``DELETE /allocations/{uid}`` only).

This module parses arguments, checks what only the command line can check and
hands over to :func:`servicekit.serve.serve`; everything else lives in
``enforcer.service``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

HELP = "run the per-node enforcer API (mutual TLS) over this node's topology, durable state and cgroups"

# flag -> settings field, for the flags that map one to one
_VALUE_FLAGS: dict[str, tuple[str, Any, str]] = {
    "--node-name": ("node_name", str, "this node's name (default: the host name; in a DaemonSet: spec.nodeName)"),
    "--compatibility": ("compatibility", str, "extended (default) or kubelet: reproduce the kubelet v1.36 answers"),
    "--sysfs-root": ("sysfs_root", Path, "discover the machine from this sysfs tree (default /sys)"),
    "--topology-file": ("topology_file", Path, "read the machine from a topology document instead of sysfs"),
    "--listen": ("listen", str, "HOST:PORT to serve on (default 0.0.0.0:8443)"),
    "--tls-cert": ("tls_cert", Path, "serving certificate (PEM)"),
    "--tls-key": ("tls_key", Path, "serving private key (PEM)"),
    "--client-ca": ("client_ca", Path, "CA that signs client certificates (required for state-changing calls)"),
    "--token-file": ("token_file", Path, "file holding the bearer token read endpoints accept"),
    "--state-dir": ("state_dir", Path, "directory of the durable state file"),
    "--cgroup-root": ("cgroup_root", Path, "cgroup mount (default /sys/fs/cgroup)"),
    "--cgroup-version": ("cgroup_version", str, "v2 (default) or v1"),
    "--cgroup-driver": ("cgroup_driver", str, "the kubelet's cgroup driver: systemd (default) or cgroupfs"),
    "--kubelet-cgroup-root": ("kubelet_cgroup_root", str, "the kubelet's --cgroup-root (default /)"),
    "--container-runtime": ("container_runtime", str, "containerd (default) or cri-o: names container cgroups"),
    "--reconcile-interval": (
        "reconcile_interval",
        float,
        "seconds between full cgroup reconciles (0: after changes only)",
    ),
    "--release-grace-seconds": (
        "release_grace_seconds",
        float,
        "release an allocation whose pod has not appeared on this node after this long",
    ),
    "--log-level": ("log_level", str, "debug, info (default), warning, error"),
    "--hook-socket": ("hook_socket", Path, "serve the OCI runtime hook on this unix socket (docs/runtime-hook.md)"),
    "--hook-deadline": ("hook_deadline", float, "seconds a hook connection may take (default 2)"),
    "--rewrite-watch": ("rewrite_watch", str, "auto (default), inotify or poll: how cgroup rewrites are seen"),
    "--kubelet-config": ("kubelet_config_file", Path, "the kubelet's config (default /var/lib/kubelet/config.yaml)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="settings file (YAML or JSON)")
    for flag, (_, kind, text) in _VALUE_FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument(
        "--dry-run-cgroups",
        action="store_true",
        default=None,
        help="record and log cgroup writes instead of making them (off-node runs, demos)",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        default=None,
        help="run without the Kubernetes API (required outside a cluster)",
    )


def run(args: argparse.Namespace) -> int:
    from enforcer.errors import ConfigError
    from enforcer.service import kube
    from enforcer.service import settings as settings_module
    from servicekit import gc_tuning, serve, tls
    from servicekit import logging as json_logging

    overrides = {field: getattr(args, flag[2:].replace("-", "_")) for flag, (field, _, _) in _VALUE_FLAGS.items()}
    overrides["dry_run_cgroups"] = args.dry_run_cgroups
    overrides["standalone"] = args.standalone
    try:
        settings = settings_module.load(args.config, overrides=overrides)
    except ConfigError as err:
        return _fail(err.message)
    if settings.tls_cert is None or settings.tls_key is None or settings.client_ca is None:
        return _fail("the enforcer serves only over mutual TLS: give --tls-cert, --tls-key and --client-ca")
    if not settings.standalone and not kube.in_cluster(os.environ):
        return _fail("not running in a cluster (no KUBERNETES_SERVICE_HOST): pass --standalone to run without one")
    from enforcer.service import startup

    try:  # before serving: a state directory that cannot hold state is one line and exit 2, not a traceback
        startup.check_state_dir(settings.state_path.parent)
    except ConfigError as err:
        return _fail(err.message)
    json_logging.configure(settings.log_level)
    try:
        reloader = tls.ReloadingServerContext(
            tls.TLSFiles(settings.tls_cert, settings.tls_key, settings.client_ca), require_client_cert=False
        )
    except tls.TLSConfigError as err:
        return _fail(str(err))

    from enforcer.service import in_flight
    from enforcer.service.main import create_app

    app = create_app(settings)
    gc_tuning.tune_for_serving()
    sys.setswitchinterval(in_flight.SWITCH_INTERVAL_SECONDS)  # why: enforcer.service.in_flight
    host, port = settings.listen_address()
    return serve.serve(
        app,
        host=host,
        port=port,
        cert_reloader=reloader,
        cert_check_interval=settings.cert_check_interval,
        log_level=settings.log_level,
        header_timeout=settings.header_timeout_seconds,
    )


def _fail(message: str) -> int:
    print(f"numaguard enforcer: {message}", file=sys.stderr)
    return 2
