"""Access reviews: SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview,
LocalSubjectAccessReview, SelfSubjectRulesReview and SelfSubjectReview."""

from __future__ import annotations

import json
from typing import Any

from .. import errors
from .authn import UserInfo
from ..store import Obj
from .authorizer import Attributes, Authorizer
from .validation import _cause


def review(authorizer: Authorizer, kind: str, user: UserInfo, body: Any, namespace: str | None) -> Obj:
    """Answer a SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview,
    SelfSubjectRulesReview or SelfSubjectReview created by `user`."""
    if not isinstance(body, dict):
        raise errors.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}')
    group = "authentication.k8s.io" if kind == "SelfSubjectReview" else "authorization.k8s.io"
    out: Obj = {"kind": kind, "apiVersion": f"{group}/v1",
                "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None}}
    spec = body.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    if kind == "SelfSubjectReview":
        out["status"] = {"userInfo": user.as_json()}
        return out
    out["spec"] = spec
    if kind == "SelfSubjectRulesReview":
        ns = spec.get("namespace") or ""
        rules, errs = authorizer.rules_for(user, ns)
        out["status"] = {
            "resourceRules": [{k: r[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if k in r}
                              for r in rules if not r.get("nonResourceURLs")],
            "nonResourceRules": [{"verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]}
                                 for r in rules if r.get("nonResourceURLs")],
            "incomplete": bool(errs)}
        if errs:
            out["status"]["evaluationError"] = "[" + ", ".join(errs) + "]"
        return out
    subject = user
    if kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
        if not spec.get("user") and not spec.get("groups"):
            raise errors.invalid(kind, "", [_cause("spec.user", "FieldValueInvalid",
                                                   'Invalid value: "": at least one of user or group must be '
                                                   "specified")], group)
        subject = UserInfo(spec.get("user") or "", tuple(spec.get("groups") or ()), spec.get("uid") or "",
                           tuple((k, tuple(v)) for k, v in (spec.get("extra") or {}).items()))
    res, non = spec.get("resourceAttributes") or {}, spec.get("nonResourceAttributes") or {}
    if bool(res) == bool(non):
        message = ("cannot be specified in combination with resourceAttributes" if res else
                   "exactly one of nonResourceAttributes or resourceAttributes must be specified")
        raise errors.invalid(kind, "", [_cause("spec.resourceAttributes" if not res else "spec.nonResourceAttributes",
                                               "FieldValueRequired" if not res else "FieldValueInvalid",
                                               ("Required value: " if not res else "Invalid value: ") + message)],
                             group)
    if kind == "LocalSubjectAccessReview" and res.get("namespace", namespace) != namespace:
        raise errors.invalid(kind, "", [_cause("spec.resourceAttributes.namespace", "FieldValueInvalid",
                                               f'Invalid value: {json.dumps(res.get("namespace"))}: must match '
                                               "metadata.namespace")], group)
    if res:
        a = Attributes(subject, res.get("verb") or "", True, "", res.get("namespace") or "", res.get("group") or "",
                       res.get("version") or "", res.get("resource") or "", res.get("subresource") or "",
                       res.get("name") or "")
    else:
        a = Attributes(subject, non.get("verb") or "", False, non.get("path") or "")
    allowed, reason = authorizer.authorize(a)
    out["status"] = {"allowed": allowed}
    if reason:
        out["status"]["reason"] = reason
    return out
