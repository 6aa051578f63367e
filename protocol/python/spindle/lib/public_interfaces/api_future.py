"""Tinker's tinker.lib.public_interfaces.api_future module path."""

from ..._futures import APIFuture

__all__ = ["APIFuture"]
