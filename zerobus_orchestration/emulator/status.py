"""gRPC failures the emulator answers with, including the ``google.rpc.ErrorInfo`` schema rejection."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

SCHEMA_VALIDATION_FAILED = "SCHEMA_VALIDATION_FAILED"
ERROR_DOMAIN = "zerobus.databricks.com"
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True)
class RpcFailure:
    """A status to end a call with; ``causes`` adds the SCHEMA_VALIDATION_FAILED ErrorInfo detail."""

    code: grpc.StatusCode
    message: str
    causes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def named(cls, code_name: str, message: str) -> RpcFailure:
        try:
            code = grpc.StatusCode[code_name.upper()]
        except KeyError:
            code = grpc.StatusCode.UNKNOWN
        return cls(code, message)

    @classmethod
    def schema(cls, message: str, causes: Sequence[str]) -> RpcFailure:
        # The SDK 1.10.0 surfaces only the status message (not the ErrorInfo) in its exception text,
        # so the reason leads the message too: callers classify on it.
        return cls(grpc.StatusCode.INVALID_ARGUMENT, f"{SCHEMA_VALIDATION_FAILED}: {message}", tuple(causes))

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        if not self.causes:
            return ()
        from google.protobuf import any_pb2
        from google.rpc import error_details_pb2, status_pb2

        info = error_details_pb2.ErrorInfo(
            reason=SCHEMA_VALIDATION_FAILED,
            domain=ERROR_DOMAIN,
            metadata={"causes": ",".join(self.causes), "error_code": "8001"},
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_pb2.Status(code=self.code.value[0], message=self.message, details=[detail])
        return ((_STATUS_DETAILS_KEY, status.SerializeToString()),)

    def apply(self, context: grpc.ServicerContext) -> None:
        """Set this status on ``context``; the handler then returns normally (never raises)."""
        trailing = self.trailing_metadata()
        if trailing:
            context.set_trailing_metadata(trailing)
        context.set_code(self.code)
        context.set_details(self.message)
