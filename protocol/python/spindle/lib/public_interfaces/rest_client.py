"""Tinker's tinker.lib.public_interfaces.rest_client module path."""

from ...rest_client import RestClient

__all__ = ["RestClient"]
