"""Strings that break a parser rather than a length check, for both fuzzers.

Random text seldom hits what a service *parses* out of a string: a time at the edge of the
calendar, a digit that is not ASCII, more digits than ``int()`` reads, a page token whose
inside is hostile. Each of these once ended in a 500 that told the caller to retry; the
fuzzers now put them in every string field they generate.
"""

from __future__ import annotations

import base64

# Inside datetime's range as written, outside it once moved to UTC.
EDGE_TIMES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-14:00"]
# Digits str.isdigit() accepts and int() does not, and integers no int64 holds.
ODD_DIGITS = ["²", "٣٤", "9" * 5000, "-" + "0" * 4999 + "1", str(2**64), "1e400"]


def token_of(raw: bytes) -> str:
    """A page token with any content, encoded as the services encode theirs."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Page tokens that decode, holding a key no page ends on: the ones above, a lone
# surrogate and a NUL (neither of which a database can take as text).
HOSTILE_TOKENS = [
    token_of('{"after":"²"}'.encode()),
    token_of(b'{"after":"' + b"9" * 5000 + b'"}'),
    token_of(b'{"after":"\\ud800"}'),
    token_of(b'{"after":"a\\u0000b"}'),
]
# What protobuf can carry (valid UTF-8): for the gRPC fuzzer and for query strings.
PARSED = [*EDGE_TIMES, *ODD_DIGITS, *HOSTILE_TOKENS]
# JSON text can also spell a lone surrogate, which no UTF-8 encoder takes.
LONE_SURROGATES = ["\ud800", "ok\udfff", "\ud83d"]
PARSED_JSON = [*PARSED, *LONE_SURROGATES]
