"""The enforcer's side of the OCI runtime hook: pin every container before its first instruction.

Modules:

- ``protocol``: the one-line JSON request/answer the hook (``numaguard_cli/oci_hook.py``) exchanges.
- ``placement``: which cgroup values a container gets (its slice, its pod's pool, or the node shared pool).
- ``registry``: the containers programmed through the hook, kept so drift and allocation changes reach them.
- ``programmer``: one request -> the container's cgroup found from ``/proc/<pid>/cgroup`` and programmed.
- ``server``: the root-only unix socket (mode 0600, peer uid checked) serving the hook.
- ``spool``: requests a fail-open hook left behind when the enforcer was unreachable, repaired here.
- ``keeper``: the loop that re-applies registered containers on foreign rewrites (inotify) and changes.
- ``metrics``: the hook's series, registered in the enforcer's registry.
- ``service``: start/stop of all of the above.

The enforcer stays the only writer of cgroupfs: the hook asks, this package writes
through the reconciler (:meth:`enforcer.service.reconciler.Reconciler.program`).
"""
