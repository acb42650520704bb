"""agentgw gateway: wiring, the turn pipeline, the store, the brains and the CLI."""

__version__ = "0.1.0"
