"""Tinker's tinker.lib.public_interfaces.training_client module path."""

from ...training_client import TrainingClient, CustomLossFnV1

__all__ = ["CustomLossFnV1", "TrainingClient"]
