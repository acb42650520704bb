"""Test doubles that ship with the package: fake model servers for tests and benchmarks."""
