"""Benchmarks: our engine against the kubelet's own timings (run as ``python -m bench.<module>``)."""
