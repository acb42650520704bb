"""Benchmarks behind `agentgw bench`."""
