"""Stand-ins for the Tinker cookbook helpers the sl/rl recipes use (see ../README.md)."""
