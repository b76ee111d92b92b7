"""Kubernetes API errors as `Status` objects."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "AlreadyExists",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the API server answers with a `Status` body, as the real one does."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404,
        f'{resource}{"." + group if group else ""} "{name}" not found',
        details={"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        f'{resource}{"." + group if group else ""} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource}{"." + group if group else ""} "{name}": '
        "the object has been modified; please apply your changes to the latest version and try again",
        reason="Conflict",
        details={"name": name, "group": group, "kind": resource},
    )


def forbidden(resource: str, name: str, reason: str, group: str = "",
              causes: list[dict[str, str]] | None = None) -> ApiError:
    """apierrors.NewForbidden: `pods "x" is forbidden: <reason>`, `pods is forbidden: …`
    without a name, `forbidden: …` without a resource. Details carry only what is set,
    as Go's omitempty does."""
    qualified = f"{resource}.{group}" if group else resource
    if not qualified:
        message = f"forbidden: {reason}"
    elif not name:
        message = f"{qualified} is forbidden: {reason}"
    else:
        message = f'{qualified} "{name}" is forbidden: {reason}'
    details: dict[str, Any] = {k: v for k, v in (("name", name), ("group", group), ("kind", resource)) if v}
    if causes:
        details["causes"] = causes
    return ApiError(403, message, details=details)


def expired(resource_version: int | str) -> ApiError:
    return ApiError(410, f"too old resource version: {resource_version}", reason="Expired")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid, worded like the apiserver: `Pod "x" is invalid: spec.containers: Required value`
    (`Role.rbac.authorization.k8s.io "x" …` for a kind of a named group)."""
    summary = "; ".join(
        f'{c["field"]}: {c["message"]}' if c.get("field") else c["message"] for c in causes
    )
    if len(causes) > 1:
        summary = "[" + ", ".join(
            f'{c["field"]}: {c["message"]}' if c.get("field") else c["message"] for c in causes
        ) + "]"
    return ApiError(
        422,
        f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}',
        details={"name": name, "group": group, "kind": kind, "causes": causes},
    )
