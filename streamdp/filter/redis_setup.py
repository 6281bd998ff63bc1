"""Setting up a connection to the Redis budget store: its URL forms and store parameters, the hash slots of a Redis
Cluster, and telling a misconfiguration (TLS against a plain port or the reverse, an untrusted certificate) from an
outage at the first contact (used by :mod:`streamdp.filter.redis_store`)."""

from __future__ import annotations

import binascii

SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")
SLOTS = 16384
_SLOT_TAGS: list[str] | None = None
class StoreConfigError(ValueError):
    """The store's URL does not fit its server, or the server is configured unsafely (TLS against a plain port or
    the reverse, an untrusted certificate, an eviction policy other than ``noeviction``): a configuration error
    (the CLI's exit 2), never retried as an outage. The message names the URL without its credentials."""


def slot_of(tag: bytes) -> int:
    """The Redis Cluster hash slot of a hash tag (CRC16/XMODEM mod 16384, as the server computes it)."""
    return binascii.crc_hqx(tag, 0) & (SLOTS - 1)


def slot_tags() -> list[str]:
    """For every hash slot, a short hash tag (``f<number>``, the smallest number that lands there) — the names of the
    per-slot keys a cluster's slot groups need besides user keys (fence copies). Computed once (~170k CRCs)."""
    global _SLOT_TAGS
    if _SLOT_TAGS is None:
        tags: list = [None] * SLOTS
        left, i = SLOTS, 0
        while left:
            t = f"f{i}"
            s = slot_of(t.encode())
            if tags[s] is None:
                tags[s] = t
                left -= 1
            i += 1
        _SLOT_TAGS = tags
    return _SLOT_TAGS


def split_store_params(url: str) -> tuple[str, dict[str, str]]:
    """The URL without the store's own query parameters (``assume_noeviction``), and those parameters."""
    base, q, query = url.partition("?")
    if not q:
        return url, {}
    keep, own = [], {}
    for part in query.split("&"):
        k, _, v = part.partition("=")
        if k == "assume_noeviction":
            own[k] = v
        elif part:
            keep.append(part)
    return base + ("?" + "&".join(keep) if keep else ""), own


def truthy(v: str) -> bool:
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"assume_noeviction must be 1/true/yes or 0/false/no, got {v!r}")




def _exception_chain(e: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        out.append(e)
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return out


def connection_problem(error: BaseException, url: str) -> str | None:
    """Why a connection failed when the cause is the URL, not an outage — TLS against a server that does not
    speak it, plain RESP against a TLS port, a certificate the client does not trust — or None (an outage:
    retried). Plain ``redis://`` failures are probed once with a TLS handshake, ``rediss://`` ones with a PING
    in clear, to tell a wrong scheme from a server that is down."""
    import ssl
    from urllib.parse import urlsplit

    chain = _exception_chain(error)
    text = " ".join(str(x) for x in chain)
    if any(isinstance(x, ssl.SSLCertVerificationError) for x in chain) or "CERTIFICATE_VERIFY_FAILED" in text:
        return ("the server's TLS certificate is not trusted (give the CA with ?ssl_ca_certs=PATH, or check the host "
                f"name): {text[:200]}")
    if url.startswith("unix://"):
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "localhost", parts.port or 6379
    except ValueError:
        return None
    if url.startswith("rediss://"):
        if _speaks_plain_resp(host, port):
            return (f"{host}:{port} answers plain RESP, not TLS: use redis:// (not rediss://), or point rediss:// at "
                    "the server's tls-port")
        if any(isinstance(x, ssl.SSLError) for x in chain):
            return f"the TLS handshake with {host}:{port} failed: {text[:200]}"
        return None
    if _speaks_tls(host, port):
        return f"{host}:{port} speaks TLS: use rediss:// (not redis://), with ?ssl_ca_certs=PATH if its CA is private"
    return None


def _speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """A TLS handshake (no verification) with host:port succeeds."""
    import socket
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            with ctx.wrap_socket(s, server_hostname=host):
                return True
    except (OSError, ValueError):
        return False


def _speaks_plain_resp(host: str, port: int, timeout: float = 2.0) -> bool:
    """host:port answers a PING in clear with a RESP reply (``+PONG``, or an error such as ``-NOAUTH``)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64)[:1] in (b"+", b"-")
    except OSError:
        return False
