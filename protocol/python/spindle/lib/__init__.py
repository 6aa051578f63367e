"""Tinker's `tinker.lib` module path (the clients live in spindle's top-level modules)."""
