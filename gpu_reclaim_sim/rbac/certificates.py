"""A self-signed certificate for the API server's secure (HTTPS) port.

kubectl and other client-go programs only send credentials over TLS, and in-cluster
configuration is HTTPS only: pods trust this certificate through the `ca.crt` of their
kube-api-access volume, a kubeconfig through `certificate-authority-data`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(host: str, service_ip: str | None = None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) valid for a year for `host`, localhost, 127.0.0.1 and the
    `kubernetes` Service's names and address `service_ip`, as kube-apiserver's serving
    certificate has them."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-reclaim-sim-apiserver")])
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    ips = {"127.0.0.1", *([service_ip] if service_ip else [])}
    try:
        ips.add(str(ipaddress.ip_address(host)))
    except ValueError:
        dns.append(host)
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys(dns)]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(ips)]
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


CERT_FILE = "apiserver.crt"


def server_context(directory: Path, host: str, service_ip: str | None = None) -> tuple[ssl.SSLContext, bytes]:
    """An SSL context serving a fresh self-signed certificate, and that certificate (the CA)."""
    cert_pem, key_pem = self_signed(host, service_ip)
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / CERT_FILE, directory / "apiserver.key"
    key_file.touch(mode=0o600, exist_ok=True)
    key_file.write_bytes(key_pem)
    cert_file.write_bytes(cert_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_pem
