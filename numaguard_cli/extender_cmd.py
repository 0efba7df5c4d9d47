"""``numaguard extender``: serve the kube-scheduler extender (``/filter``, ``/prioritize``) over HTTPS.

Settings come from ``--config FILE`` (YAML or JSON; see :mod:`extender.settings`), then the flags
below.  The serving certificate is reloaded when its files change.  Exit status: 0 after a graceful
stop (SIGTERM/SIGINT), 2 for unusable settings, 1 when the server cannot start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "serve the kube-scheduler extender (filter and prioritize by the enforcers' own admission)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="settings file (YAML or JSON)")
    parser.add_argument("--listen", help="HOST:PORT to serve on (default 0.0.0.0:8444)")
    parser.add_argument("--tls-cert", type=Path, help="serving certificate chain (PEM)")
    parser.add_argument("--tls-key", type=Path, help="serving private key (PEM)")
    parser.add_argument("--enforcers-file", type=Path, help="static map of node name -> enforcer https URL")
    parser.add_argument("--enforcer-ca", type=Path, help="CA that signed the enforcers' serving certificates")
    parser.add_argument("--client-cert", type=Path, help="client certificate presented to the enforcers")
    parser.add_argument("--client-key", type=Path, help="private key of --client-cert")
    parser.add_argument("--token-file", type=Path, help="the enforcers' read-only bearer token (instead of a cert)")
    parser.add_argument("--poll-interval-seconds", type=float, help="how often each enforcer is polled (default 1)")
    parser.add_argument("--freshness-seconds", type=float, help="a replica older than this is not used (default 5)")
    parser.add_argument(
        "--enforcer-down", choices=("filter", "pass"), help="a node whose enforcer does not answer (default filter)"
    )
    parser.add_argument("--log-level", help="debug, info (default), warning, error")


_OVERRIDES = (
    "listen",
    "tls_cert",
    "tls_key",
    "enforcers_file",
    "enforcer_ca",
    "client_cert",
    "client_key",
    "token_file",
    "poll_interval_seconds",
    "freshness_seconds",
    "enforcer_down",
    "log_level",
)


def run(args: argparse.Namespace) -> int:
    from extender import main, settings
    from extender.assemble import assemble
    from extender.directory import DirectoryError
    from servicekit import gc_tuning, serve, tls
    from servicekit import logging as json_logging

    try:
        config = settings.load(args.config, overrides={name: getattr(args, name) for name in _OVERRIDES})
        components = assemble(config)
        reloader = None
        if config.tls_cert is not None and config.tls_key is not None:
            reloader = tls.ReloadingServerContext(tls.TLSFiles(config.tls_cert, config.tls_key))
        host, port = config.listen_address()
    except (settings.ConfigError, DirectoryError, tls.TLSConfigError) as err:
        print(f"numaguard extender: {getattr(err, 'message', err)}", file=sys.stderr)
        return 2
    json_logging.configure(config.log_level)
    app = main.create_app(components, max_body_bytes=config.max_body_bytes)
    gc_tuning.tune_for_serving(gc_tuning.ANSWER_CACHING)  # see servicekit.gc_tuning
    return serve.serve(
        app,
        host=host,
        port=port,
        cert_reloader=reloader,
        cert_check_interval=config.cert_check_interval,
        log_level=config.log_level.lower(),
    )
