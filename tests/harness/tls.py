# SPDX-License-Identifier: Apache-2.0
"""Throwaway certificates for tests, made with openssl (and keytool for a
Java truststore) at test time: nothing is committed, nothing outlives the
test run's temp dir.

    ca = CertificateAuthority(os.path.join(base, "ca"))
    server = ca.issue("server", hosts=["localhost", "127.0.0.1"])
    client = ca.issue("client", cn="outbox_relay")
    server.cert, server.key, ca.cert      # PEM files
    server.pkcs12("secret")               # PKCS#12 keystore for a Java server
    ca.truststore("secret")               # PKCS#12 truststore (keytool)

Keys are EC P-256 (quick to make; OpenSSL, GnuTLS and Java 17 all take them),
unencrypted, mode 0600. Certificates are valid from now for two days.

This module knows nothing about PostgreSQL, Kafka or the relay.
"""

import ipaddress
import os
import secrets

from . import procs

_REQ_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = %(cn)s
[ext]
%(ext)s
"""


def _is_ip(host):
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


class Certificate:
    """A key and its certificate, PEM files in dir (name.key, name.crt)."""

    def __init__(self, dir, name, ca):
        self.dir = dir
        self.name = name
        self.key = os.path.join(dir, name + ".key")
        self.cert = os.path.join(dir, name + ".crt")
        self.ca = ca

    def pkcs12(self, password):
        """A PKCS#12 keystore (openssl pkcs12) holding the key, this
        certificate and the CA's; returns its path."""
        path = os.path.join(self.dir, self.name + ".p12")
        procs.run(["openssl", "pkcs12", "-export", "-in", self.cert, "-inkey", self.key,
                   "-certfile", self.ca.cert, "-name", self.name, "-out", path,
                   "-passout", "pass:" + password], timeout=60)
        os.chmod(path, 0o600)
        return path

    def chown(self, user):
        """Give the key and certificate to Unix user (a server that runs as
        another user than the tests, PostgreSQL as 'postgres' under root)."""
        import pwd
        pw = pwd.getpwnam(user)
        for p in (self.key, self.cert):
            os.chown(p, pw.pw_uid, pw.pw_gid)


class CertificateAuthority:
    """A self-signed CA in dir (ca.key, ca.crt) that issues certificates."""

    def __init__(self, dir, name="outbox-relay test CA"):
        self.dir = dir
        self.name = name
        self.key = os.path.join(dir, "ca.key")
        self.cert = os.path.join(dir, "ca.crt")
        os.makedirs(dir, exist_ok=True)
        self._req(self.key, None, name, "basicConstraints = critical, CA:TRUE\n"
                  "keyUsage = critical, keyCertSign, cRLSign\n"
                  "subjectKeyIdentifier = hash\n", ["-x509", "-days", "2"])

    def _req(self, key, csr, cn, ext, extra):
        cfg = os.path.join(self.dir, "req-%s.cnf" % secrets.token_hex(4))
        with open(cfg, "w") as f:
            f.write(_REQ_CONFIG % {"cn": cn, "ext": ext})
        out = csr or self.cert
        procs.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                   "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", out,
                   "-config", cfg, "-extensions", "ext"] + extra, timeout=60)
        os.chmod(key, 0o600)
        os.unlink(cfg)

    def issue(self, name, hosts=(), cn=None):
        """A certificate named name (files name.key, name.crt in this CA's
        dir): for a server when hosts are given (subjectAltName DNS or IP
        entries, CN the first host), else for a client whose CN is cn (a
        PostgreSQL user name under `cert` authentication, a Kafka principal
        User:CN=cn)."""
        c = Certificate(self.dir, name, self)
        cn = cn or (hosts[0] if hosts else name)
        if hosts:
            alt = ", ".join(("IP:%s" if _is_ip(h) else "DNS:%s") % h for h in hosts)
            ext = ("subjectAltName = %s\nextendedKeyUsage = serverAuth, clientAuth\n" % alt)
        else:
            ext = "extendedKeyUsage = clientAuth\n"
        ext += ("basicConstraints = CA:FALSE\n"
                "keyUsage = critical, digitalSignature, keyEncipherment\n")
        csr = os.path.join(self.dir, name + ".csr")
        self._req(c.key, csr, cn, ext, [])
        cfg = os.path.join(self.dir, name + ".ext")
        with open(cfg, "w") as f:
            f.write("[ext]\n" + ext)
        procs.run(["openssl", "x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                   "-set_serial", "0x" + secrets.token_hex(8), "-days", "2", "-out", c.cert,
                   "-extfile", cfg, "-extensions", "ext"], timeout=60)
        os.unlink(csr)
        os.unlink(cfg)
        return c

    def truststore(self, password):
        """A PKCS#12 truststore holding this CA's certificate, made with
        keytool; returns its path."""
        path = os.path.join(self.dir, "truststore.p12")
        if os.path.exists(path):
            os.unlink(path)
        procs.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", self.cert,
                   "-keystore", path, "-storetype", "PKCS12", "-storepass", password],
                  timeout=120)
        return path
