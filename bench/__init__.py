"""Benchmarks: speed and retrieval quality of memproxy against peers."""
