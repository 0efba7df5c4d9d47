"""The machine model, its discovery, and the Topology Manager."""
