"""numaguard's kube-scheduler extender: ``filter`` and ``prioritize`` answered by the enforcers' own engine.

Pure core (``wire``, ``engine_adapter``, ``replica``, ``scoring``, ``decide``, ``directory``, ``settings``,
``poller``) and a thin FastAPI shell (``main``).  See ``docs/scheduler-extender.md``.
"""
