"""Benchmarks that are programs, not scripts: the real-bug subjects (benchmarks/realbugs/)."""
