"""Render deploy/redis/users.acl.template into a Redis aclfile, passwords from the environment.

    VIGIL_REDIS_WORKER_PASSWORD=... VIGIL_REDIS_COLLECTOR_PASSWORD=... \\
        python3 deploy/redis/render_acl.py -o /etc/redis/users.acl

Each password is written as its SHA-256 (Redis's "#<hash>" form), so the aclfile holds none
in clear. Standard library only: it runs on the Redis host without Vigil installed. Exits 2
with one line on stderr when a password is missing, too short or shared by both users.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import string
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "users.acl.template"
PASSWORDS = {
    "worker_password_sha256": "VIGIL_REDIS_WORKER_PASSWORD",
    "collector_password_sha256": "VIGIL_REDIS_COLLECTOR_PASSWORD",
}
# 32 characters: 128 bits as hex, half of what `openssl rand -hex 32` (and Redis's own
# ACL GENPASS) gives. A broker password is tried at network speed, with no lockout.
MIN_PASSWORD_CHARS = 32
# A password goes into a URL (redis://user:password@host): characters that would need
# percent-encoding there are refused rather than silently mangled.
URL_SAFE = frozenset(string.ascii_letters + string.digits + "-._~")


class RenderError(ValueError):
    """A password that cannot go into the aclfile; the message names its variable."""


def acl_render(template: str, env: dict[str, str]) -> str:
    """The aclfile for `template`: comment lines dropped, password hashes filled in."""
    values = {}
    for field, var in PASSWORDS.items():
        password = env.get(var, "")
        if len(password) < MIN_PASSWORD_CHARS:
            raise RenderError(f"{var}: set it to at least {MIN_PASSWORD_CHARS} characters")
        if not set(password) <= URL_SAFE:
            raise RenderError(f"{var}: use only letters, digits and - . _ ~ (it goes in a URL)")
        values[field] = hashlib.sha256(password.encode()).hexdigest()
    if len({env[var] for var in PASSWORDS.values()}) < len(PASSWORDS):
        raise RenderError(
            "VIGIL_REDIS_COLLECTOR_PASSWORD: must differ from VIGIL_REDIS_WORKER_PASSWORD"
        )
    lines = [line for line in template.splitlines() if line and not line.startswith("#")]
    return string.Template("\n".join(lines) + "\n").substitute(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-o", "--output", type=Path, help="aclfile to write (default: stdout)")
    args = parser.parse_args(argv)
    try:
        text = acl_render(TEMPLATE.read_text(encoding="utf-8"), dict(os.environ))
    except RenderError as exc:
        print(f"render_acl: {exc}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
        return 0
    # Hashes only, but still nothing for other local users to try offline.
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
