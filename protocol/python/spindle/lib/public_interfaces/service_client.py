"""Tinker's tinker.lib.public_interfaces.service_client module path."""

from ...service_client import ServiceClient

__all__ = ["ServiceClient"]
