"""Benchmarks: data generator, dense baseline and harness (not part of the default test run)."""
