"""Benchmarks that print figures (recorded in docs/benchmarks.md)."""
