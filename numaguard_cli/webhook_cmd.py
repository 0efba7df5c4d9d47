"""``numaguard webhook``: serve the admission webhook over HTTPS.

Settings come from ``--config FILE`` (YAML or JSON), then ``WEBHOOK_*``
environment variables, then the flags below (later wins); see
:mod:`webhook.settings` for every field.  The serving certificate is reloaded
when its files change (a rotated Secret needs no restart).  Exit status: 0
after a graceful stop (SIGTERM/SIGINT), 2 for unusable settings, 1 when the
server cannot start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "serve the admission webhook (AdmissionReview v1 on /mutate and /validate)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="settings file (YAML or JSON)")
    parser.add_argument("--listen", help="HOST:PORT to serve on (default 0.0.0.0:8443)")
    parser.add_argument("--tls-cert", type=Path, help="serving certificate chain (PEM)")
    parser.add_argument("--tls-key", type=Path, help="serving private key (PEM)")
    parser.add_argument(
        "--client-ca", type=Path, help="CA of the kube-apiserver's client certificate: reviews without one are refused"
    )
    parser.add_argument("--client-cert", type=Path, help="client certificate presented to the enforcers")
    parser.add_argument("--client-key", type=Path, help="private key of --client-cert")
    parser.add_argument("--enforcer-ca", type=Path, help="CA that signed the enforcers' serving certificates")
    parser.add_argument("--enforcers-file", type=Path, help="static map of node name -> enforcer https URL")
    parser.add_argument("--enforcer-discovery", choices=("static", "daemonset"), help="where enforcer URLs come from")
    parser.add_argument("--pod-source", choices=("seen", "kubernetes"), help="where bindings find their pods")
    parser.add_argument("--topology-manager-scope", choices=("pod", "container"), help="the nodes' scope, for the plan")
    parser.add_argument(
        "--failure-mode", choices=("deny", "allow"), help="an unreachable enforcer denies (default) or allows"
    )
    parser.add_argument(
        "--unknown-pod", dest="unknown_pod_mode", choices=("deny", "allow"), help="a binding for an unseen pod"
    )
    parser.add_argument("--numa-cpus", type=int, help="CPUs of one NUMA node (for the plan's NUMA count)")
    parser.add_argument("--numa-memory", help="memory of one NUMA node, a quantity such as 64Gi")
    parser.add_argument("--log-level", help="debug, info (default), warning, error")


_OVERRIDES = (
    "listen",
    "tls_cert",
    "tls_key",
    "client_ca",
    "client_cert",
    "client_key",
    "enforcer_ca",
    "enforcers_file",
    "enforcer_discovery",
    "pod_source",
    "topology_manager_scope",
    "failure_mode",
    "unknown_pod_mode",
    "numa_cpus",
    "numa_memory",
    "log_level",
)


def run(args: argparse.Namespace) -> int:
    from servicekit import logging as json_logging
    from servicekit import serve, tls
    from webhook import errors, main, settings

    try:
        config = settings.load(args.config, overrides={name: getattr(args, name) for name in _OVERRIDES})
    except errors.ConfigError as err:
        print(f"numaguard webhook: {err}", file=sys.stderr)
        return 2
    try:
        app = main.create_app(config)
        files = main.server_tls_files(config)
        reloader = tls.ReloadingServerContext(files) if files is not None else None
    except (errors.ConfigError, tls.TLSConfigError) as err:
        print(f"numaguard webhook: {err}", file=sys.stderr)
        return 2
    json_logging.configure(config.log_level)
    host, port = config.listen_address()
    return serve.serve(
        app,
        host=host,
        port=port,
        cert_reloader=reloader,
        cert_check_interval=config.cert_check_interval,
        log_level=config.log_level.lower(),
    )
