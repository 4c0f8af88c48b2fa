"""What a webhook or Alertmanager channel may point at, and how its address is shown.

A channel's URL is written by an operator but read by a worker that holds Vigil's secrets, so
it may only be https, or plain http to this host (a local relay or Alertmanager): never
`file://` or another scheme, never plain http across a network. A webhook URL often carries
its own secret in the path (Slack's and Teams' incoming webhooks do), so pages, CSVs, errors
and logs show it as `scheme://host[:port]/...`. A channel's HMAC key comes from an environment
variable whose name starts with SECRET_ENV_PREFIX, so a config cannot name SECRET_KEY or the
database URL and have it used as a key (and so reveal a signature made with it).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

SECRET_ENV_PREFIX = "VIGIL_CHANNEL_SECRET_"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class DestinationError(ValueError):
    """A channel config that may not be used; the message names the key and the problem."""


def url_check(url: object) -> str:
    """The URL if a channel may send to it, else DestinationError saying why."""
    if not isinstance(url, str) or not url.strip():
        raise DestinationError("url: missing (an https:// address)")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError as exc:
        raise DestinationError(f"url: not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise DestinationError(
            f"url: {scheme or 'no'} scheme refused: use https:// (or http:// to localhost)"
        )
    if not host:
        raise DestinationError("url: no host")
    if scheme == "http" and host.lower() not in LOCAL_HOSTS:
        raise DestinationError(
            f"url: plain http:// to {host} refused: use https:// (http:// only to localhost, "
            "127.0.0.1 or ::1)"
        )
    return url.strip()


def secret_env_check(name: object) -> str:
    """The variable name if a channel may read its key from it, else DestinationError."""
    if name in (None, ""):
        return ""
    if not isinstance(name, str) or not re.fullmatch(
        re.escape(SECRET_ENV_PREFIX) + r"[A-Z0-9_]+", name
    ):
        raise DestinationError(
            f"secret_env: {name!r} refused: name a variable {SECRET_ENV_PREFIX}<NAME> "
            "(capitals, digits, _)"
        )
    return name


def config_check(kind: str, config: object) -> None:
    """Refuse a webhook or Alertmanager channel's config that may not be used."""
    if kind not in ("webhook", "alertmanager"):
        return
    if not isinstance(config, dict):
        raise DestinationError("config: must be an object with a url")
    url_check(config.get("url"))
    if kind == "webhook":
        secret_env_check(config.get("secret_env"))


def url_redacted(url: str) -> str:
    """`scheme://host[:port]/...`: the URL without its credentials, path or query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(not a URL)"
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port else "")
    if parts.path.strip("/") or parts.query or parts.fragment:
        shown += "/..."
    return shown
