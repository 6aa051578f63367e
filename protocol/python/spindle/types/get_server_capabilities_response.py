"""Tinker's GetServerCapabilitiesResponse (Spindle's ServerCapabilities) and SupportedModel."""

from __future__ import annotations

from ._server import GetServerCapabilitiesResponse, SupportedModel

__all__ = ["GetServerCapabilitiesResponse", "SupportedModel"]
