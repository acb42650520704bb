"""The agent's persona: its core identity, and later its measured voice."""
