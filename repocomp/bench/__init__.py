"""Benchmarks behind `repocomp bench ...`: each module registers one sub-verb and prints a table (or JSON)."""
