"""Who a request comes from, as kube-apiserver's authenticators decide it.

- The cluster's admin token (the one in `sim --kubeconfig`'s kubeconfig) is the user
  `kubernetes-admin` in the group `system:masters`, which no authorizer refuses.
- A ServiceAccount token (see `serviceaccounts.TokenIssuer`) is
  `system:serviceaccount:NS:NAME` in `system:serviceaccounts`,
  `system:serviceaccounts:NS` and `system:authenticated`.
- No credentials over HTTPS is `system:anonymous` in `system:unauthenticated`
  (`--anonymous-auth=true`); over the plain-HTTP port it is `system:unsecured` in
  `system:masters`, as the old `--insecure-port` was: kubectl and client-go never send a
  token over plain HTTP.
- Any other token is a 401.
Impersonation (`Impersonate-User`, `-Group`, `-Uid` headers; `kubectl --as`) follows the
apiserver's filter: the caller needs `impersonate` on users, groups, serviceaccounts or
uids, and the impersonated user is then authorized instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
ANONYMOUS_NAME = "system:anonymous"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def as_json(self) -> dict[str, Any]:
        """`authentication.k8s.io/v1` UserInfo (empty fields omitted)."""
        out: dict[str, Any] = {"username": self.name}
        if self.uid:
            out["uid"] = self.uid
        if self.groups:
            out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


ADMIN = UserInfo("kubernetes-admin", (MASTERS, AUTHENTICATED))
UNSECURED = UserInfo("system:unsecured", (MASTERS, AUTHENTICATED))
ANONYMOUS = UserInfo(ANONYMOUS_NAME, (UNAUTHENTICATED,))


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}")


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of `system:serviceaccount:NS:NAME`, else None."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, sep, name = username[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


def impersonation(headers: Mapping[str, str]) -> tuple[str, list[str], str, list[tuple[str, str]]] | None:
    """(user, groups, uid, extras) asked for by `Impersonate-*` headers, or None."""
    user = headers.get("Impersonate-User")
    groups = headers.getall("Impersonate-Group", []) if hasattr(headers, "getall") else []
    uid = headers.get("Impersonate-Uid", "")
    extras = [(k[len("Impersonate-Extra-"):].lower(), v) for k, v in headers.items()
              if k.lower().startswith("impersonate-extra-")]
    if user is None and not groups and not uid and not extras:
        return None
    return user or "", list(groups), uid, extras


def impersonated_user(name: str, groups: list[str], uid: str,
                      extras: list[tuple[str, str]]) -> UserInfo:
    """The user an impersonating request acts as: a service account gets its groups when
    none are given, and every user but anonymous is in system:authenticated."""
    sa = split_service_account(name)
    all_groups = list(groups)
    if sa is not None and not groups:
        all_groups = list(service_account_groups(sa[0]))
    if name != ANONYMOUS_NAME and not any(g in (AUTHENTICATED, UNAUTHENTICATED) for g in all_groups):
        all_groups.append(AUTHENTICATED)
    extra: dict[str, list[str]] = {}
    for key, value in extras:
        extra.setdefault(key, []).append(value)
    return UserInfo(name, tuple(all_groups), uid, tuple((k, tuple(v)) for k, v in extra.items()))
