"""The enforcer's state: what it remembers across restarts.

- ``journal``: what the enforcer uses: a base checkpoint plus an append-only,
  checksummed journal of per-change patches, compaction, and the
  ``recover-state`` operations over both; the only writer of the state directory.
- ``checkpoint``: the versioned, checksummed, atomically written file format of
  the base (and its backup), and the recovery of that one file.
- ``errors``: ``CheckpointCorruptError``, ``CheckpointVersionError`` and friends.

Import modules, not names (``from enforcer.state import checkpoint``).  The
state *values* (CPU and memory manager state) live with their managers; this
package stores whatever dict the engine gives it.
"""
