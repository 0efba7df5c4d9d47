"""The enforcer's cgroup edge: the only code that writes cgroupfs.

Modules (import them, not their names: ``from enforcer.cgroups import reconcile``):

- ``driver``: the ``CgroupDriver`` Protocol and its value types (``CPUQuota``, fields).
- ``v2`` / ``v1``: the kernel drivers (``v2`` holds the file primitives both use).
- ``recording``: ``RecordingCgroupDriver``, the in-memory fake for tests and dry-run.
- ``naming``: the kubelet's pod/container cgroup paths for the cgroupfs and systemd drivers.
- ``reconcile``: drive desired values into the cgroups, safely ordered, reporting drift.
- ``resize``: the kubelet's in-place resize actuation order as an explicit write plan.
- ``errors``: ``CgroupWriteError`` and friends, each naming the file.

Nothing here decides *what* CPUs or limits a container gets; the engine does.
"""
