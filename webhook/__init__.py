"""The numaguard admission webhook.

It serves AdmissionReview v1 on ``/mutate`` and ``/validate`` for Pod CREATE
(validate resources, record the resource plan as annotations), ``pods/binding``
(ask the chosen node's enforcer to allocate, record the allocation on the
Binding or deny the placement) and ``pods/resize`` / Pod UPDATE (resize
legality, then the node's feasibility).

Layers, outermost first: ``main`` (composition root) and ``routes`` (HTTP:
parse, call, serialize) are the only modules that import FastAPI;
``admission`` dispatches a parsed request to ``handlers``; the handlers do the
I/O (``enforcer_client``, ``pod_cache``, ``discovery``) around pure decisions
(``plan``, ``binding``, ``resize_decision``, ``patch``, ``responses``).
``kube`` is the only module that talks to the Kubernetes API.  Nothing here
imports ``enforcer``: the two services meet only through ``shared.contract``.
"""
