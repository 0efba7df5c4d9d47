"""Who may send admission reviews: the kube-apiserver, proven by its client certificate.

The apiserver authenticates to webhooks with the client certificate named in
its ``AdmissionConfiguration`` ``kubeConfigFile`` (``manifests/apiserver/``).
With ``client_ca`` set, the webhook's TLS server verifies client certificates
against it (optional at the handshake, so the kubelet's probes still reach
``/healthz`` and ``/readyz``) and :func:`check_reviewer` insists, for
``/mutate`` and ``/validate``, on a verified certificate with the clientAuth
usage and, when ``allowed_clients`` is set, one of those names (CN or DNS SAN).
Anyone else is refused before the body is read, so no unauthenticated caller
can make a node allocate, release or resize.  Without ``client_ca`` nobody is
checked: then only the network (NetworkPolicy) protects the webhook.
Framework-free: the route hands in the verified peer.
"""

from __future__ import annotations

from collections.abc import Sequence

from servicekit.tls import CLIENT_AUTH_USAGE, PeerCertificate
from webhook import errors


def check_reviewer(peer: PeerCertificate | None, *, required: bool, allowed: Sequence[str]) -> None:
    if not required:
        return
    if peer is None:
        raise errors.CallerUnauthenticated(
            "admission reviews need the kube-apiserver's client certificate (AdmissionConfiguration kubeConfigFile)"
        )
    name = peer["common_name"] or ""
    if CLIENT_AUTH_USAGE not in peer.get("extended_key_usages", ()):
        raise errors.CallerForbidden(f"the client certificate {name!r} is not issued for client authentication")
    if allowed and name not in allowed and not set(peer["dns_names"]) & set(allowed):
        raise errors.CallerForbidden(f"the client certificate {name!r} is not an allowed admission reviewer")
