"""One handler per kind of review: Pod CREATE, ``pods/binding``, resize (``pods/resize`` and Pod UPDATE).

Each handler parses the review's objects, does the I/O its decision needs
(the pod cache, an enforcer call) and hands the results to a pure decision
module (``plan``, ``binding``, ``resize_decision``); :mod:`.common` turns the
decision into a response.  Handlers never import FastAPI.
"""
