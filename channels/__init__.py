"""Channels: each turns its native events into ``Inbound`` and delivers replies."""
