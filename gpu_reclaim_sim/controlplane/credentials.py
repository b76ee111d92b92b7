"""The cluster's certificate authority and what it signs, as kubeadm lays them out.

One CA signs the API server's serving certificate and every client's certificate: the
scheduler's, the controller-manager's, the admin's, the API server's own for the kubelets
it proxies to, and one per node (`system:node:<name>` in `system:nodes`, so that the Node
authorizer and NodeRestriction hold the node agent to its own node). The controller-manager
publishes the CA to pods (`kube-root-ca.crt`) and signs approved CSRs with it. The
ServiceAccount token key is an EC key (ES256), as kube-apiserver accepts.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=30)  # the lifetime of a run's certificates (a demo may run for days)
_PEM = serialization.Encoding.PEM


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _private(path: Path, data: bytes) -> Path:
    path.touch(mode=0o600, exist_ok=True)
    path.write_bytes(data)
    return path


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as files."""
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """The cluster CA of a run: `ca.crt` and `ca.key` in `directory` (0700)."""
    directory: Path

    @property
    def cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def key(self) -> Path:
        return self.directory / "ca.key"

    @classmethod
    def create(cls, directory: Path) -> "Authority":
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                             data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                             crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        authority = cls(directory)
        _private(authority.key, _key_pem(key))
        authority.cert.write_bytes(cert.public_bytes(_PEM))
        return authority

    def issue(self, name: str, common_name: str, organizations: tuple[str, ...] = (), *,
              server_names: tuple[str, ...] = ()) -> Issued:
        """A certificate for `common_name` (the user a client authenticates as) in the groups
        `organizations`, written as `<name>.crt`/`<name>.key`; with `server_names` (DNS names
        and IP addresses) a serving certificate too."""
        ca_key = serialization.load_pem_private_key(self.key.read_bytes(), None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.timezone.utc)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server_names else [])
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALID_FOR)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if server_names:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in server_names]),
                                            critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        issued = Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        _private(issued.key, _key_pem(key))
        issued.cert.write_bytes(cert.public_bytes(_PEM))
        return issued

    def signing_key(self, name: str = "sa") -> tuple[Path, Path]:
        """The ServiceAccount token signing key and its public half (which verifies)."""
        key = _key()
        public = self.directory / f"{name}.pub"
        public.write_bytes(key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return _private(self.directory / f"{name}.key", _key_pem(key)), public

    def kubeconfig(self, path: Path, server: str, user: str, *, client: Issued | None = None,
                   token: str | None = None, namespace: str | None = None) -> Path:
        """A kubeconfig (JSON is YAML) for `server` that trusts the CA and authenticates with
        `client`'s certificate or a bearer `token`, in `namespace` if given; 0600, for it names
        the key."""
        auth = {"token": token} if token else {"client-certificate": str(client.cert), "client-key": str(client.key)} \
            if client else {}
        path.touch(mode=0o600, exist_ok=True)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": user,
            "clusters": [{"name": "cluster", "cluster": {"server": server, "certificate-authority": str(self.cert)}}],
            "users": [{"name": user, "user": auth}],
            "contexts": [{"name": user, "context": {"cluster": "cluster", "user": user,
                                                    **({"namespace": namespace} if namespace else {})}}],
        }, indent=1))
        return path


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
