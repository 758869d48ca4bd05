"""Exit codes of the client commands: one scheme, so a script can tell a complete answer
from a partial one without parsing text.

`reachstore audit verify` follows the same scheme (0 every chain verifies, 1 a chain is
broken, 2 it could not check anything).
"""

from __future__ import annotations

COMPLETE = 0
FAILED = 1
USAGE = 2
PARTIAL = 3
INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C

HELP = """\
exit codes:
  0    complete: every namespace answered, every document was stored, every task shown
       completed (a reach task: succeeded); a reach submission without --wait: reserved
  3    partial: part of the result is missing and the rest is printed — a query with
       coverage below 1, an ingest where some documents failed, tasks that failed, wait
       for review or still ran when the command ended
  1    failed: the request was refused (stderr: one line with the error code, category
       and message), or nothing worked: no namespace answered, no document was stored
  2    usage or configuration error (bad flags, unreadable files)
  130  interrupted (Ctrl-C); `ingest` continues where it stopped when run again"""


# The top-level help also names the commands that read the store directly.
TOP_LEVEL_HELP = f"""\
{HELP}

`audit verify` uses the same codes: 0 every chain verifies, 1 a chain is broken, 2 it
could not check; `keys` exits 0, 1 (no such key) or 2."""


class UsageError(Exception):
    """Something the user must fix before anything is sent; exits with ``USAGE``."""


def outcome(done: int, failed: int) -> int:
    """The exit code of a result made of parts: ``done`` parts worked, ``failed`` did not."""
    if failed == 0:
        return COMPLETE
    return PARTIAL if done > 0 else FAILED
