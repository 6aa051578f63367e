"""Tinker's tinker.lib.public_interfaces.sampling_client module path."""

from ...sampling_client import SamplingClient

__all__ = ["SamplingClient"]
