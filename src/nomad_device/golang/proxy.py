"""Which proxy a request to Nomad goes through: Go's ``net/http.ProxyFromEnvironment``.

The ``nomad`` CLI (and every Go program using the default transport) reads
``HTTP_PROXY``/``http_proxy`` for ``http://`` addresses and
``HTTPS_PROXY``/``https_proxy`` for ``https://`` ones (the upper-case name
first), and ``NO_PROXY``/``no_proxy``; it never proxies ``localhost`` or a
loopback address, and it ignores ``ALL_PROXY``. ``NO_PROXY`` holds
comma-separated IP addresses, CIDR blocks and domain names, each optionally
with ``:port``; ``foo.com`` matches it and its subdomains, ``.foo.com`` (or
``*.foo.com``) only subdomains, ``*`` everything. A value without a scheme is
taken as ``http://``. Under CGI (``REQUEST_METHOD`` set) ``HTTP_PROXY`` is
refused, as a client could have set it. Unix sockets are never proxied.

The rules are from ``golang.org/x/net/http/httpproxy``; the code is ours.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

__all__ = ["ProxyError", "proxy_for", "redact_url"]

_PORTS: Final = {"http": "80", "https": "443", "socks5": "1080"}


class ProxyError(ValueError):
    """A proxy setting Go would refuse to use for this request."""


def _env(env: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = env.get(name, "")
        if value:
            return value
    return ""


def _parse_proxy(value: str) -> str | None:
    """``parseProxy``: a URL with scheme http, https or socks5; else try ``http://`` first."""
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme in ("http", "https", "socks5") and parts.netloc:
        return value
    retry = urlsplit("http://" + value)
    return "http://" + value if retry.netloc else None


@dataclass(frozen=True)
class _Match:
    kind: str  # "ip", "cidr", "domain", "all"
    host: str = ""
    port: str = ""
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    match_host: bool = False


def _split_host_port(text: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort``, loosely: ``host:port`` or ``[v6]:port``; None if neither."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            return None
        return text[1:end], text[end + 2 :]
    if text.count(":") != 1:
        return None
    host, port = text.split(":")
    return host, port


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _matchers(no_proxy: str) -> list[_Match]:
    out: list[_Match] = []
    for raw in no_proxy.split(","):
        p = raw.strip().lower()
        if not p:
            continue
        if p == "*":
            return [_Match("all")]
        try:
            if "/" in p:
                out.append(_Match("cidr", network=ipaddress.ip_network(p, strict=False)))
                continue
        except ValueError:
            pass
        split = _split_host_port(p)
        host, port = split if split is not None else (p, "")
        if split is not None and not host:
            continue
        ip = _ip(host)
        if ip is not None:
            out.append(_Match("ip", ip=ip, port=port))
            continue
        if not host:
            continue
        if host.startswith("*."):
            host = host[1:]
        match_host = not host.startswith(".")
        if match_host:
            host = "." + host
        out.append(_Match("domain", host=host, port=port, match_host=match_host))
    return out


def _use_proxy(host: str, port: str, no_proxy: str) -> bool:
    if host == "localhost":
        return False
    ip = _ip(host)
    if ip is not None and ip.is_loopback:
        return False
    host = host.strip().lower()
    for m in _matchers(no_proxy):
        if m.kind == "all":
            return False
        if m.kind == "cidr" and ip is not None and m.network is not None and ip in m.network:
            return False
        if m.kind == "ip" and ip is not None and m.ip == ip and m.port in ("", port):
            return False
        if (
            m.kind == "domain"
            and (host.endswith(m.host) or (m.match_host and host == m.host[1:]))
            and m.port in ("", port)
        ):
            return False
    return True


def proxy_for(url: str, env: Mapping[str, str]) -> str | None:
    """The proxy URL for a request to ``url``, or None to connect directly."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        proxy = _parse_proxy(_env(env, "HTTPS_PROXY", "https_proxy"))
    elif parts.scheme == "http":
        proxy = _parse_proxy(_env(env, "HTTP_PROXY", "http_proxy"))
        if proxy is not None and env.get("REQUEST_METHOD"):
            raise ProxyError(
                "refusing to use HTTP_PROXY in a CGI environment (REQUEST_METHOD is set), as "
                "Go does: a client could have set it"
            )
    else:
        return None
    if proxy is None:
        return None
    host = parts.hostname or ""
    port = str(parts.port) if parts.port else _PORTS.get(parts.scheme, "")
    if not _use_proxy(host, port, _env(env, "NO_PROXY", "no_proxy")):
        return None
    return proxy


def redact_url(url: str) -> str:
    """The URL with its user information (a name, a password) replaced by ``xxxxx``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"xxxxx@{host}").geturl()
