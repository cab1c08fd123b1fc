"""Transports: the official SDK (``sdk``) and the in-process fake (``memory``)."""

from zerobus_orchestration.transport.base import Stream, Transport

__all__ = ["Stream", "Transport"]
