"""Pure domain core shared by the webhook and the enforcer.

Only the standard library and pydantic live here: no FastAPI, no file, network
or cgroup I/O.  Both services meet only through the models in
:mod:`shared.contract`, carried over HTTP or in pod annotations.
"""
