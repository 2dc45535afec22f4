"""Certificates for go-plugin's AutoMTLS.

The host puts its own certificate in ``PLUGIN_CLIENT_CERT``; the plugin makes a
throwaway self-signed one, requires the host's, and publishes its own (DER,
unpadded base64) in the handshake line. Our host client does the mirror image.
"""

from __future__ import annotations

import base64
import datetime as _dt
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KeyPair", "cert_from_handshake", "cert_to_handshake", "generate_keypair"]


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @property
    def cert_der(self) -> bytes:
        return x509.load_pem_x509_certificate(self.cert_pem).public_bytes(
            serialization.Encoding.DER
        )


def generate_keypair(common_name: str = "localhost") -> KeyPair:
    """A self-signed ECDSA P-256 certificate valid for ``localhost``.

    It is its own CA (the peer trusts exactly this certificate) and is good for
    both server and client authentication, as go-plugin's own are.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    now = _dt.datetime.now(_dt.UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nomad-device-sdk"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(seconds=30))
        .not_valid_after(now + _dt.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def cert_to_handshake(pair: KeyPair) -> str:
    """DER as unpadded standard base64, the form go-plugin's client decodes."""
    return base64.b64encode(pair.cert_der).decode().rstrip("=")


def cert_from_handshake(field: str) -> bytes:
    """The PEM certificate published in a handshake's cert field."""
    der = base64.b64decode(field + "=" * (-len(field) % 4))
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)
