"""Proxy headers count only from the proxy. X-Forwarded-Proto (Django's
SECURE_PROXY_SSL_HEADER) and X-Forwarded-For (the rate limit's client
address) are written by the TLS proxy; a client reaching gunicorn directly
could write them too. So they are dropped unless the connection comes from
an address in NIGHTJAR_TRUSTED_PROXIES."""

import ipaddress

from django.conf import settings

PROXY_HEADERS = ("HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_HOST", "HTTP_X_FORWARDED_PORT")


def trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in settings.NIGHTJAR_TRUSTED_PROXIES:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def client_address(request) -> str:
    """The client's address, as the rate limits count it."""
    # Behind the TLS proxy the client is the address the proxy saw, which it
    # appends last to X-Forwarded-For; anything before it the client can forge.
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) and request.META.get("HTTP_X_FORWARDED_FOR"):
        return request.META["HTTP_X_FORWARDED_FOR"].split(",")[-1].strip()
    return request.META.get("REMOTE_ADDR", "")


class TrustedProxyHeaders:
    """First in MIDDLEWARE, so SecurityMiddleware and the views never see a forged header."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if not trusted(request.META.get("REMOTE_ADDR", "")):
            for header in PROXY_HEADERS:
                request.META.pop(header, None)
        return self.get_response(request)
