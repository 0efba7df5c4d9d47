"""``numaguard certs``: issue the private CA and every certificate the services use.

Writes the bundle of :func:`servicekit.certs.issue_bundle` (layout documented
there) and prints the files written.  ``--print-ca-bundle`` prints the base64
of ``ca.crt``, the value of a webhook configuration's ``caBundle`` field when
cert-manager does not inject it (issuing the bundle first only if DIR has no CA
yet, so printing never rotates certificates).  All the work is in :mod:`servicekit.certs`;
this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from servicekit import certs

HELP = "issue the CA, serving and client certificates (webhook, enforcer, operator, metrics) into a directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="directory to write the bundle into")
    parser.add_argument(
        "--namespace",
        default=certs.DEFAULT_NAMESPACE,
        help="namespace of the webhook and enforcer Services (their DNS names go into the certificates)",
    )
    parser.add_argument(
        "--enforcer-host",
        action="append",
        default=[],
        metavar="NAME_OR_IP",
        help="extra DNS name or IP for the enforcer serving certificate (repeatable)",
    )
    parser.add_argument("--days", type=float, default=None, help="validity of the leaf certificates (default 365)")
    parser.add_argument(
        "--new-ca",
        action="store_true",
        help="create a new CA even if DIR already holds ca.crt/ca.key (default: reuse it, rotating leaves only)",
    )
    parser.add_argument(
        "--print-ca-bundle",
        action="store_true",
        help="print only base64(ca.crt) for caBundle fields; writes nothing when DIR already holds ca.crt",
    )


def run(args: argparse.Namespace) -> int:
    if args.days is not None and args.days <= 0:
        print("numaguard certs: --days must be positive", file=sys.stderr)
        return 2
    existing_ca = certs.Bundle(Path(args.out), created_ca=False).cert("ca")
    if args.print_ca_bundle and existing_ca.exists():
        print(base64.b64encode(existing_ca.read_bytes()).decode("ascii"))
        return 0
    try:
        bundle = certs.issue_bundle(
            args.out,
            namespace=args.namespace,
            enforcer_hosts=tuple(args.enforcer_host),
            validity=certs.Validity(days=args.days),
            reuse_ca=not args.new_ca,
        )
    except (certs.CertificateError, OSError) as err:
        print(f"numaguard certs: {err}", file=sys.stderr)
        return 1
    if args.print_ca_bundle:
        print(base64.b64encode(bundle.cert("ca").read_bytes()).decode("ascii"))
        return 0
    print(f"{'created' if bundle.created_ca else 'reused'} CA in {bundle.directory}")
    for path in bundle.files():
        print(path)
    return 0
