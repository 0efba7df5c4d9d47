"""The per-node enforcer service: the engine behind a mutual-TLS HTTP API, durable state and cgroups.

Layers, top to bottom (import modules, not names):

- ``main`` (composition root and lifespan), ``routes`` (parse, call, serialise)
  and ``deps`` (FastAPI providers): the only modules that import FastAPI.
- ``node_service``: the facade.  One lock serialises every decision; each
  acknowledged change is on disk (``enforcer.state.checkpoint``) before the
  answer; cgroup reconciles are triggered after it.
- ``reconciler`` (engine views -> cgroup targets -> ``enforcer.cgroups``),
  ``kube`` (the only user of the Kubernetes client: watch this node's pods),
  ``auth`` (client certificates and bearer tokens), ``metrics``, ``wire``
  (engine values -> ``shared.contract`` models), ``legality`` (resize rules the
  API server would enforce), ``startup`` (topology, state and driver at boot),
  ``settings`` and ``errors``.

Nothing here decides which CPUs a pod gets: ``enforcer.engine`` does.
"""
