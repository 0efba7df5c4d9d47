"""The node allocation engine: the kubelet's container manager admission path, pure.

``NodeEngine`` wires the Topology Manager (scopes, merge), the CPU manager and
the memory manager over one plain, serialisable state value.  It does no I/O:
the enforcer service persists its snapshots and programs cgroups from its
allocations, and ``numaguard plan`` drives it from scenario files.
"""
