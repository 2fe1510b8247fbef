"""The exceptions fluxrt raises: one class per fluxrt::ErrorCode, each a fluxrt.Error and also the
built-in exception a Python caller already catches for that kind of failure."""

from __future__ import annotations


class Error(Exception):
    """Any failure of the engine. ``code`` is the engine's ErrorCode in words ("not found", ...);
    the message is the engine's one line, naming the file, tensor or argument. ``field``: for a
    refused request, the engine's request field at fault ("steps", "size", "reference_images",
    ...; fluxrt::Error::field), else None."""

    code: str = "internal error"
    field: str | None = None


class InvalidArgumentError(Error, ValueError):
    """A bad argument, request or option."""

    code = "invalid argument"


class NotFoundError(Error, FileNotFoundError):
    """A model, file or component that is not there."""

    code = "not found"


class OutOfMemoryError(Error, MemoryError):
    """The model or the request does not fit (checked before anything large is allocated)."""

    code = "out of memory"


class FormatError(Error, RuntimeError):
    """A file that is not what it claims (corrupt, truncated, an unexpected layout)."""

    code = "format error"


class UnsupportedError(Error, RuntimeError):
    """Understood but not handled: another model family, a device this build lacks."""

    code = "unsupported"


class IoError(Error, RuntimeError):
    """Reading or writing a file failed."""

    code = "i/o error"


class DeviceError(Error, RuntimeError):
    """The accelerator failed."""

    code = "device error"


class InternalError(Error, RuntimeError):
    """A bug: an internal check of the engine failed."""

    code = "internal error"


class CancelledError(Error, RuntimeError):
    """The call was cancelled (Ctrl-C raises KeyboardInterrupt instead)."""

    code = "cancelled"


# fluxrt::error_code_name's words -> class; the extension raises these for fluxrt::Error.
BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgumentError, NotFoundError, OutOfMemoryError, FormatError, UnsupportedError,
                IoError, DeviceError, InternalError, CancelledError)
}
