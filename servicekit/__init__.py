"""Service infrastructure shared by the webhook and the enforcer shells.

``certs`` issues the private CA and the certificates both services use,
``tls`` builds (and hot-reloads) their SSL contexts and reads the verified peer
certificate from an ASGI scope, ``serve`` runs an ASGI app under uvicorn with
those contexts, and ``logging`` writes one redacted JSON object per log line.

This package knows nothing about admission, pods or NUMA: it must never import
``webhook``, ``enforcer`` or ``numaguard_cli`` (an import-linter contract), so
either service can depend on it without depending on the other.  Import the
modules and call through them (``from servicekit import tls`` ->
``tls.server_context(...)``).
"""
