"""The enforcer's state: what it remembers across restarts.

- ``checkpoint``: the durable, versioned, checksummed state file and the
  ``recover-state`` operations; the only writer of the state directory.
- ``errors``: ``CheckpointCorruptError``, ``CheckpointVersionError`` and friends.

Import modules, not names (``from enforcer.state import checkpoint``).  The
state *values* (CPU and memory manager state) live with their managers; this
package stores whatever dict the engine gives it.
"""
