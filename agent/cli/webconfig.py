"""``training-node-agent hash-password``: a bcrypt hash for ``basic_auth_users`` in the web config.

The password comes from the terminal without echo, or from the first line of standard input (so
``install.sh`` can pipe it); it is never an argument, where ``ps`` and shell history would see it.
"""

from __future__ import annotations

import argparse
import getpass
import sys

import bcrypt

from agent.cli.main import EXIT_CONFIG, register


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cost", type=int, default=10, help="bcrypt cost, 4..31 (default 10, as htpasswd -B)")


def cmd_hash_password(args: argparse.Namespace) -> int:
    if not 4 <= args.cost <= 31:
        print("hash-password: --cost must be between 4 and 31", file=sys.stderr)
        return EXIT_CONFIG
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("hash-password: the passwords differ", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("hash-password: empty password", file=sys.stderr)
        return 1
    print(bcrypt.hashpw(password.encode(), bcrypt.gensalt(args.cost)).decode())
    return 0


register(
    "hash-password", "print a bcrypt hash for the web config's basic_auth_users", _add_args, cmd_hash_password
)
