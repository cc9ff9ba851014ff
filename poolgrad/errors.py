"""Exceptions raised by poolgrad, with the status codes of the CANN operator documents the API follows."""
from __future__ import annotations

__all__ = ["PoolGradError", "ParamNullptrError", "ParamInvalidError",
           "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_PARAM_INVALID"]

ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002


class PoolGradError(Exception):
    """Base class of every error poolgrad raises on purpose.

    Attributes
    ----------
    code : int
        The CANN status code (161001 for a missing array, 161002 for any invalid argument).
    """

    code: int = 0

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ParamNullptrError(PoolGradError, TypeError):
    """A required array argument was ``None`` (CANN ``ACLNN_ERR_PARAM_NULLPTR``, 161001)."""

    code = ACLNN_ERR_PARAM_NULLPTR


class ParamInvalidError(PoolGradError, ValueError):
    """An argument has an invalid dtype, rank, shape, layout, length, value or index (161002)."""

    code = ACLNN_ERR_PARAM_INVALID
