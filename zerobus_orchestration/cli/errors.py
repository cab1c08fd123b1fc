"""How ``zerobus-orch`` ends on a failure: one line ``error: <cause>`` on stderr and a non-zero exit.

Exit 2 for bad input (the same command fails the same way until the input changes: configuration, table
names, files, data that does not fit, a resume that no longer matches its input), 1 for anything else.
``OneLineErrorsTyper`` applies this to every command registered on the app, commands added later
included; ``run`` applies it around the whole app for option-parsing errors and anything else that
escapes. The traceback is printed only with ``zerobus-orch --debug ...`` or ``ZEROBUS_DEBUG=1``.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar, cast

import typer
from pydantic import ValidationError
from typer.exceptions import TyperException

from zerobus_orchestration.errors import ZerobusOrchestrationError

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
DEBUG_ENV = "ZEROBUS_DEBUG"

F = TypeVar("F", bound=Callable[..., Any])

# Environment variables whose values may be secret: masked if a foreign exception's text carries one.
_SECRET_NAME_MARKERS = ("secret", "token", "password", "credential", "key")
_MIN_MASKED_LEN = 8
_debug_option = False


def set_debug(enabled: bool) -> None:
    """The root ``--debug`` option of the current invocation."""
    global _debug_option
    _debug_option = enabled


def debug_enabled() -> bool:
    return _debug_option or os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def is_bad_input(exc: BaseException) -> bool:
    """Whether ``exc`` says the input is wrong (exit 2) rather than that something failed (exit 1).

    The package's own validation errors are ``ValueError`` / ``TypeError`` subclasses (``ConfigError``,
    ``TableNameError``, ``WriteBoundaryError``, ``ResumeInputError``...); foreign ``ValueError`` s are
    unparseable input (a corrupt Parquet file, an unknown enum value); pydantic validation counts too, and
    so do paths that are not what the user said they are (input files, ``--config``, ``--warehouse``).
    """
    if isinstance(exc, ZerobusOrchestrationError):
        return isinstance(exc, ValueError | TypeError)
    return isinstance(
        exc, ValidationError | ValueError | FileNotFoundError | NotADirectoryError | IsADirectoryError
    )


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: the package's own messages as they are, foreign ones with their type."""
    text = _scrub(str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # "invalid zerobus configuration from x:" then one indented line per key -> "...from x: a; b"
    headed = bool(lines) and lines[0].endswith(":")
    text = lines[0] + " " + "; ".join(lines[1:]) if headed else "; ".join(lines)
    if isinstance(exc, ZerobusOrchestrationError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def report(exc: BaseException, status: int | None = None) -> int:
    """Print ``exc`` the CLI way (traceback first when debugging); returns the exit status, ``status``
    if given (a command that knows better than the classification), else 2 for bad input, else 1."""
    if debug_enabled():
        traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write(f"error: {one_line(exc)}\n")
    sys.stderr.flush()
    if status is not None:
        return status
    return EXIT_BAD_INPUT if is_bad_input(exc) else EXIT_FAILURE


def one_line_errors(func: F) -> F:
    """Wrap a command: an exception becomes ``report`` + ``typer.Exit``; typer's own exits and usage
    errors (``TyperException``: bad parameters) pass through."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as exc:
            raise typer.Exit(report(exc)) from None

    return cast(F, wrapper)


class OneLineErrorsTyper(typer.Typer):
    """A ``Typer`` whose every command reports failures with ``one_line_errors``."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:  # type: ignore[override]
        register = super().command(*args, **kwargs)

        def decorator(func: F) -> F:
            register(one_line_errors(func))
            return func

        return decorator


def run(app: typer.Typer) -> NoReturn:
    """The console script: the app with option-parsing errors on one line too."""
    try:
        status = app(standalone_mode=False)
    except TyperException as exc:  # click's exceptions, as vendored by typer: usage errors and the like
        if type(exc).__name__ == "NoArgsIsHelpError":
            cast(Any, exc).show()  # a bare group prints its help, as in standalone mode
        else:
            ctx = getattr(exc, "ctx", None)
            see = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            sys.stderr.write(f"error: {_scrub(exc.format_message())}{see}\n")
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("error: aborted\n")
        sys.exit(EXIT_FAILURE)
    except Exception as exc:
        sys.exit(report(exc))
    sys.exit(status if isinstance(status, int) else 0)


def _scrub(text: str) -> str:
    for name, value in os.environ.items():
        lowered = name.lower()
        if len(value) >= _MIN_MASKED_LEN and any(marker in lowered for marker in _SECRET_NAME_MARKERS):
            text = text.replace(value, "***")
    return text
