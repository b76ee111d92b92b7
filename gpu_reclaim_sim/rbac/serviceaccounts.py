"""ServiceAccounts and their tokens, as current Kubernetes has them.

- `TokenIssuer`: the apiserver's bound service account tokens (the TokenRequest API,
  `POST .../serviceaccounts/NAME/token`, `kubectl create token`): JWTs signed with the
  cluster's own key, for the API audience, bound to the account (and to a pod or secret
  when asked). A token stops working when it expires, when its account is deleted or
  recreated, and a minute after the pod it is bound to is gone, as the apiserver checks.
  A pod's token asked for 3607 s lives a year (`--service-account-extend-token-expiration`,
  on by default), so a kubelet that never refreshes it still works.
- `admit_pod`: the ServiceAccount admission plugin: the account must exist (else 403), and
  unless `automountServiceAccountToken` is false (on the pod, else on the account) the pod
  gets the projected `kube-api-access-xxxxx` volume (token, `kube-root-ca.crt`'s `ca.crt`,
  the namespace) mounted at `/var/run/secrets/kubernetes.io/serviceaccount` in every
  container, as the plugin injects it.
- `ServiceAccountController`: the controller-manager's serviceaccount and
  root-ca-cert-publisher controllers: every namespace has a `default` ServiceAccount and a
  `kube-root-ca.crt` ConfigMap with the API server's CA.

Not simulated: legacy token Secrets (`kubernetes.io/service-account-token`), image pull
secrets from the account, key rotation, the OIDC discovery endpoints.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import random
import uuid
from typing import Any, Callable

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


from ..api.timestamps import parse_time, utcnow
from .. import errors
from .authn import AUTHENTICATED, UserInfo, service_account_groups, service_account_username
from ..errors import ApiError
from ..resources import BY_KIND
from ..store import Change, Obj, Store
from ..api.timestamps import rfc3339

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
VOLUME_PREFIX = "kube-api-access-"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
WARN_ONLY_EXPIRATION = 3607  # what the admission plugin asks for; the apiserver extends it
EXTENDED_EXPIRATION = 365 * 24 * 3600
MIN_EXPIRATION = 600
DELETED_POD_LEEWAY = 60  # a bound pod's token lasts this long after the pod's deletion time
_CLAIMS = "kubernetes.io"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
SA, POD, SECRET, CONFIGMAP, NAMESPACE = (BY_KIND[k] for k in (
    "ServiceAccount", "Pod", "Secret", "ConfigMap", "Namespace"))
ROOT_CA_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
    "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
    "distributions of Kubernetes clusters.")


class TokenIssuer:
    """Signs and checks service account tokens (ES256 with a key made at start)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._key = ec.generate_private_key(ec.SECP256R1())
        public = self._key.public_key().public_bytes(serialization.Encoding.DER,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo)
        self._public = self._key.public_key()
        self.kid = base64.urlsafe_b64encode(hashlib.sha256(public).digest()).decode().rstrip("=")
        self._verified: dict[str, dict[str, Any]] = {}  # signature checked once per token

    def issue(self, account: Obj, *, audiences: list[str] | None = None, expiration_seconds: int = 3600,
              bound: Obj | None = None) -> tuple[str, dt.datetime]:
        """A token for `account`, bound to `bound` (a Pod or Secret) if given; returns the
        token and the expiry the TokenRequest answers."""
        meta = account["metadata"]
        issued = int(utcnow().timestamp())
        audiences = list(audiences or API_AUDIENCES)
        lifetime = expiration_seconds
        private: dict[str, Any] = {"namespace": meta["namespace"],
                                   "serviceaccount": {"name": meta["name"], "uid": meta["uid"]}}
        if bound is not None:
            ref = {"name": bound["metadata"]["name"], "uid": bound["metadata"]["uid"]}
            private["pod" if bound.get("kind") == "Pod" else "secret"] = ref
            if (bound.get("kind") == "Pod" and expiration_seconds == WARN_ONLY_EXPIRATION
                    and set(audiences) <= set(API_AUDIENCES)):
                lifetime = EXTENDED_EXPIRATION
                private["warnafter"] = issued + WARN_ONLY_EXPIRATION
        claims = {"aud": audiences, "exp": issued + lifetime, "iat": issued, "nbf": issued, "iss": ISSUER,
                  "jti": str(uuid.uuid4()), "sub": service_account_username(meta["namespace"], meta["name"]),
                  _CLAIMS: private}
        token = jwt.encode(claims, self._key, algorithm="ES256", headers={"kid": self.kid})
        return token, dt.datetime.fromtimestamp(issued + expiration_seconds, dt.timezone.utc)

    def authenticate(self, token: str) -> UserInfo | None:
        """The service account a token stands for, or None if it is not (or no longer) valid."""
        claims = self._verified.get(token)
        if claims is None:
            try:
                claims = jwt.decode(token, self._public, algorithms=["ES256"], issuer=ISSUER,
                                    audience=list(API_AUDIENCES), options={"verify_exp": False})
            except jwt.PyJWTError:
                return None
            if len(self._verified) > 10_000:
                self._verified.clear()
            self._verified[token] = claims
        if claims["exp"] < utcnow().timestamp():
            return None
        private = claims.get(_CLAIMS) or {}
        namespace, ref = private.get("namespace", ""), private.get("serviceaccount") or {}
        account = self.store.find(SA, namespace, ref.get("name", ""))
        if account is None or account["metadata"]["uid"] != ref.get("uid") \
                or account["metadata"].get("deletionTimestamp"):
            return None
        extra: list[tuple[str, tuple[str, ...]]] = [("authentication.kubernetes.io/credential-id",
                                                     (f"JTI={claims.get('jti', '')}",))]
        for key, rtype in (("pod", POD), ("secret", SECRET)):
            bound = private.get(key)
            if not bound:
                continue
            obj = self.store.find(rtype, namespace, bound.get("name", ""))
            if obj is None or obj["metadata"]["uid"] != bound.get("uid") or _deleted_long_ago(obj):
                return None
            if key == "pod":
                extra = [("authentication.kubernetes.io/pod-name", (bound["name"],)),
                         ("authentication.kubernetes.io/pod-uid", (bound["uid"],))] + extra
        return UserInfo(service_account_username(namespace, ref["name"]),
                        service_account_groups(namespace) + (AUTHENTICATED,), ref["uid"], tuple(extra))


def _deleted_long_ago(obj: Obj) -> bool:
    deleted = parse_time(obj["metadata"].get("deletionTimestamp"))
    return deleted is not None and deleted < utcnow() - dt.timedelta(seconds=DELETED_POD_LEEWAY)


def token_request(issuer: TokenIssuer, store: Store, namespace: str, name: str, body: Any) -> Obj:
    """`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: the TokenRequest answered."""
    if not isinstance(body, dict):
        raise errors.bad_request("TokenRequest in version \"v1\" cannot be handled as a TokenRequest")
    account = store.get(SA, namespace, name)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    seconds = spec.get("expirationSeconds", 3600)
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise errors.bad_request("spec.expirationSeconds must be an integer")
    if seconds < MIN_EXPIRATION or seconds > 2**32:
        limit = "less than 10 minutes" if seconds < MIN_EXPIRATION else "larger than 2^32 seconds"
        raise errors.invalid("TokenRequest", name, [{
            "reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
            "message": f"Invalid value: {seconds}: may not specify a duration {limit}"}], "authentication.k8s.io")
    audiences = [a for a in spec.get("audiences") or [] if isinstance(a, str)] or list(API_AUDIENCES)
    bound = None
    ref = spec.get("boundObjectRef")
    if isinstance(ref, dict) and ref:
        kinds = {"Pod": POD, "Secret": SECRET}
        if ref.get("kind") not in kinds or ref.get("apiVersion", "v1") != "v1":
            raise errors.bad_request(f"cannot bind token for object of type {ref.get('kind')}")
        bound = store.get(kinds[ref["kind"]], namespace, ref.get("name", ""))
        if ref.get("uid") and ref["uid"] != bound["metadata"]["uid"]:
            raise ApiError(409, f'Operation cannot be fulfilled on {ref["kind"]} "{ref.get("name")}": the UID in '
                                f'the bound object reference ({ref["uid"]}) does not match the UID in record. The '
                                "object might have been deleted and then recreated", reason="Conflict")
    token, expires = issuer.issue(account, audiences=audiences, expiration_seconds=seconds, bound=bound)
    return {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {"audiences": audiences, "expirationSeconds": seconds,
                     "boundObjectRef": ref if isinstance(ref, dict) and ref else None},
            "status": {"token": token, "expirationTimestamp": rfc3339(expires)}}


# --- admission ----------------------------------------------------------------------------

def admit_pod(store: Store, pod: Obj) -> None:
    """The ServiceAccount admission plugin on pod creation."""
    spec = pod["spec"]
    meta = pod["metadata"]
    spec["serviceAccountName"] = spec.get("serviceAccountName") or "default"
    spec["serviceAccount"] = spec["serviceAccountName"]
    namespace = meta.get("namespace") or "default"
    account = store.find(SA, namespace, spec["serviceAccountName"])
    if account is None:
        raise errors.forbidden("pods", meta.get("name") or "", (
            f"error looking up service account {namespace}/{spec['serviceAccountName']}: serviceaccount "
            f"\"{spec['serviceAccountName']}\" not found"))
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken")
    if automount is False:
        return
    volumes = spec.setdefault("volumes", [])
    existing = next((v.get("name") for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith(VOLUME_PREFIX)), None)
    name = existing or VOLUME_PREFIX + "".join(random.choice(_NAME_CHARS) for _ in range(5))
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            mounts = c.setdefault("volumeMounts", [])
            if any(isinstance(m, dict) and m.get("mountPath") == TOKEN_MOUNT_PATH for m in mounts):
                continue
            mounts.append({"name": name, "readOnly": True, "mountPath": TOKEN_MOUNT_PATH})
            needed = True
    if needed and existing is None:
        volumes.append(api_access_volume(name))
    if not volumes:
        del spec["volumes"]


def api_access_volume(name: str) -> Obj:
    return {"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": WARN_ONLY_EXPIRATION, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}}


# --- controllers --------------------------------------------------------------------------

class ServiceAccountController:
    """Keeps a `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap in every
    active namespace (created with the namespace, put back if deleted or changed)."""

    def __init__(self, store: Store, create: Callable[..., Obj], ca_pem: bytes) -> None:
        self.store = store
        self.create = create  # a create through admission (Cluster.create)
        self.ca = ca_pem.decode()
        for rtype in (NAMESPACE, SA, CONFIGMAP):
            store.subscribe(rtype, self._on_change)

    def _on_change(self, change: Change) -> None:
        kind = change.rtype.kind
        if kind == "Namespace" and change.type == "ADDED":
            self.ensure(change.new["metadata"]["name"])
        elif kind in ("ServiceAccount", "ConfigMap") and change.new["metadata"].get("name") in (
                "default", ROOT_CA_CONFIGMAP):
            self.ensure(change.new["metadata"].get("namespace") or "")

    def ensure(self, namespace: str) -> None:
        ns = self.store.find(NAMESPACE, None, namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if self.store.find(SA, namespace, "default") is None:
            self.create(SA, {"metadata": {"name": "default"}}, namespace)
        data = {"ca.crt": self.ca}
        current = self.store.find(CONFIGMAP, namespace, ROOT_CA_CONFIGMAP)
        if current is None:
            self.create(CONFIGMAP, {"metadata": {"name": ROOT_CA_CONFIGMAP,
                                                 "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                                    "data": data}, namespace)
        elif current.get("data") != data:
            self.store.update(CONFIGMAP, namespace, ROOT_CA_CONFIGMAP, lambda o: o.__setitem__("data", data))
