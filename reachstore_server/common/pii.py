"""Keyed masking of personal data, shared by receipts, logs and the audit trail.

A masked value reads ``[<kind>:<8 hex>]``, the hex being the start of
HMAC-SHA256(secret, kind + ":" + normalised value). The same value always gives the same
token, so masked events stay joinable ("these two receipts went to the same phone"),
while without the secret a token cannot be turned back into the value or confirmed by
guessing. Values are normalised first: phone and card numbers lose their separators
(spaces, dashes and dots, one or two between groups; a Chinese mobile also its +86 / 0086
prefix, which becomes "+86"), e-mail addresses are lowercased, and what people type for
digits, spaces and dashes counts as the ASCII ones: full-width forms, every script's
decimal digits (Arabic-Indic, Devanagari, ...), no-break and thin spaces, en and em dashes.
So "138.0013.8000", "１３８ ００１３ ８０００" and "١٣٨٠٠١٣٨٠٠٠" are one phone, one token.

In free text (``mask_text``):

- ``email``: local@domain.tld, in any script (internationalised addresses included);
- ``cn_id``: 18-character resident ID numbers with a real birth date and a valid
  ISO 7064 MOD 11-2 check character;
- ``phone``: Chinese mobiles (1[3-9] and 9 digits, optionally +86 / 86 / 0086 before,
  grouped 3-4-4 with spaces or dashes) and international numbers written with a leading
  "+" and 8 to 15 digits (spaces, dashes, dots and parentheses allowed);
- ``card``: 13 to 19 digits, optionally grouped, Luhn-valid and starting as payment
  cards do (2221-2720 or 3-6): Luhn alone passes one random number in ten, and
  timestamps and order numbers start otherwise.

In a map, keys are masked like any text; two keys that mask alike keep both values, the
later under the token plus "#2", "#3", ...

A number counts only as a whole: digits glued to letters or other digits ("ORD2026...",
a longer digit run), or to a decimal point (versions, IP addresses, decimals) are left
alone.

In structured data (``mask_value``), the whole value of a sensitive field is masked,
whatever its type (null and true/false excepted: they say nothing). A field name is split
on "_", "-", ".", spaces and camelCase boundaries; it is sensitive when a part is one of
``SENSITIVE_WORDS`` (address, name, token, password, secret, authorization, phone,
mobile, email, ...) or two neighbouring parts form one of ``SENSITIVE_PAIRS`` (api key,
id card, id number, entity id: a reach task's business entity is often a customer's
e-mail, phone or name, ...), unless the whole name is in ``NOT_PERSONAL``, our own
``*_name`` and paging fields (``channel_name``, ``page_token``, ...). So ``name``,
``full_name``, ``customerName`` and ``shipping-address`` are masked, ``channel_name`` and
``namespace`` are not. Chinese names are matched by the words in ``SENSITIVE_ZH``
(``客户姓名``, ``手机号``). A sensitive value that is exactly one recognisable item (an e-mail,
a phone) masks to that kind's token, joinable with the same value in free text; anything
else becomes a ``field`` token.
"""

from __future__ import annotations

import bisect
import datetime
import functools
import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from reachstore_server.common.canonical import canonical_json
from reachstore_server.common.config_errors import ConfigError

__all__ = [
    "NOT_PERSONAL",
    "SENSITIVE_PAIRS",
    "SENSITIVE_WORDS",
    "SENSITIVE_ZH",
    "Masker",
    "bounded",
    "is_sensitive_field",
    "masker_from_env",
    "might_hold_personal_data",
]

MIN_SECRET_BYTES = 16
ELLIPSIS = "…"

SENSITIVE_WORDS = frozenset(
    {
        "address", "addresses", "addr", "name", "names", "username", "nickname",
        "fullname", "firstname", "lastname", "surname", "token", "password", "passwd",
        "pwd", "secret", "authorization", "cookie", "phone", "phones", "mobile", "tel",
        "telephone", "cellphone", "email", "emails", "passport", "ssn",
    }
)  # fmt: skip
SENSITIVE_PAIRS = frozenset(
    {
        ("api", "key"), ("access", "key"), ("private", "key"), ("id", "card"),
        ("id", "number"), ("e", "mail"), ("entity", "id"),
    }
)  # fmt: skip
# Chinese field names are not split into words: these are looked for anywhere in a name.
SENSITIVE_ZH = ("姓名", "名字", "手机", "电话", "地址", "住址", "邮箱", "身份证", "密码", "联系人")
NOT_PERSONAL = frozenset(
    {
        "channel_name", "namespace_name", "action_name", "file_name", "host_name",
        "method_name", "service_name", "key_name", "page_token", "next_page_token",
    }
)  # fmt: skip

TOKEN = re.compile(r"\[(?:phone|cn_id|email|card|field):[0-9a-f]{8}\]")

# Detection runs on a copy (the probe) in which what people type for digits, spaces and
# dashes is made ASCII, one character for one, so a span found in the probe is the same span
# in the text: full-width forms (U+FF01-FF5E, U+3000), every script's decimal digits
# (Arabic-Indic, Devanagari, mathematical, ...), the other spaces (no-break, narrow, thin)
# and dashes (hyphen, en and em dash, minus). ``_to_probe`` builds it.
_SPACES = (0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F)
_DASHES = (*range(0x2010, 0x2016), 0x2212, 0xFE58, 0xFE63)


@functools.cache
def _probe_table() -> dict[int, int]:
    """The probe's translation table, built on first use: finding every script's digits
    means a look at each code point (about 0.1 s), which a process that never masks
    anything should not pay at import."""
    table = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
    table |= dict.fromkeys(_SPACES, 0x20) | dict.fromkeys(_DASHES, 0x2D)
    for code in range(0x80, 0x110000):
        digit = unicodedata.decimal(chr(code), None)
        if digit is not None:
            table[code] = 0x30 + digit
    return table


def _to_probe(text: str) -> str:
    return text.translate(_probe_table())


# A found span is blanked in the copy with this, so later kinds never look inside it.
_BLANK = "\x00"

# Each pattern starts only where a run of its characters starts (the look-behinds), so a
# long run is scanned once, not once per position: no pattern can backtrack
# catastrophically, and 100 KB of digits or "@" is linear work.
_NUMBER_START = r"(?<![0-9A-Za-z+])(?<![0-9][.,])"
_NUMBER_END = r"(?![0-9A-Za-z])(?![.,][0-9])"
# Letters of any script, so internationalised addresses (josé@exämple.com, 用户@例子.中国)
# count too. Scripts written without spaces (CJK, kana, hangul) cannot say where a name
# glued to the text before it starts, so a local part is either all in such a script (and
# then not glued to a word) or holds none of it (and then may follow such text directly:
# "邮箱zhang.san@example.com"); a top-level domain likewise, so "example.com谢谢" ends at
# "com".
_UNSPACED = r"\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"
_SPACED_WORD = rf"[^\W{_UNSPACED}]"
_EMAIL = re.compile(
    rf"(?:(?<![\w.%+\-])[{_UNSPACED}]+|(?<!{_SPACED_WORD})(?<![.%+\-])(?:{_SPACED_WORD}|[.%+\-])+)@"
    r"(?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.)+"
    r"(?:[A-Za-z]{2,63}(?![A-Za-z0-9\-])|[^\W\d_A-Za-z]{2,63}(?![\w\-]))"
)
# Between the groups of a written number: a space, dash or dot, or two of them ("138  0013").
_GAP = r"[ \-.]{0,2}"
_CN_ID = re.compile(
    _NUMBER_START
    + rf"([1-9][0-9]{{5}}){_GAP}((?:19|20)[0-9]{{2}})([0-9]{{2}})([0-9]{{2}})"
    + rf"{_GAP}([0-9]{{3}}[0-9Xx])"
    + _NUMBER_END
)
_CN_MOBILE = re.compile(
    _NUMBER_START
    + rf"(?:(?:\+|00)?86{_GAP})?(1[3-9][0-9]){_GAP}([0-9]{{4}}){_GAP}([0-9]{{4}})"
    + _NUMBER_END
)
_INTL_PHONE = re.compile(r"(?<![0-9A-Za-z+])\+[0-9](?:[ \-.]?\(?[0-9]\)?){6,18}(?![0-9])")
_DIGIT_GROUPS = re.compile(_NUMBER_START + rf"[0-9]+(?:{_GAP}[0-9]+)*")
_DIGITS = re.compile(r"[0-9]+")
_NOT_DIGIT = re.compile(r"[^0-9]+")
_CANDIDATE = re.compile(r"[0-9@]")
_LUHN_DOUBLED = {str(d): (2 * d) % 9 if d != 9 else 9 for d in range(10)}

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"

Span = tuple[int, int, str, str]  # start, end, kind, normalised value


def _digits(text: str) -> str:
    return _NOT_DIGIT.sub("", text)


def _luhn(digits: str) -> bool:
    kept = sum(map(int, digits[-1::-2]))
    doubled = sum(_LUHN_DOUBLED[c] for c in digits[-2::-2])
    return (kept + doubled) % 10 == 0


def _card_prefix(digits: str) -> bool:
    return digits[0] in "3456" or 2221 <= int(digits[:4]) <= 2720


def _emails(probe: str) -> Iterator[Span]:
    for m in _EMAIL.finditer(probe):
        yield m.start(), m.end(), "email", m.group().lower()


def _cn_ids(probe: str) -> Iterator[Span]:
    for m in _CN_ID.finditer(probe):
        area, year, month, day, tail = m.groups()
        try:
            datetime.date(int(year), int(month), int(day))
        except ValueError:
            continue
        value = (area + year + month + day + tail).upper()
        total = sum(int(c) * w for c, w in zip(value, _ID_WEIGHTS, strict=False))
        if _ID_CHECK[total % 11] == value[17]:
            yield m.start(), m.end(), "cn_id", value


def _cn_mobiles(probe: str) -> Iterator[Span]:
    for m in _CN_MOBILE.finditer(probe):
        yield m.start(), m.end(), "phone", "+86" + "".join(m.groups())


def _intl_phones(probe: str) -> Iterator[Span]:
    for m in _INTL_PHONE.finditer(probe):
        start, text = m.start(), m.group().rstrip(" -.(")
        if text.count("(") != text.count(")"):
            text = text.rstrip(")")
        digits = _digits(text)
        while len(digits) > 15:
            # Trailing groups past the 15 digits E.164 allows are another number.
            cut = max(text.rfind(c) for c in " -.(")
            if cut <= 0:
                break
            text = text[:cut].rstrip(" -.(")
            digits = _digits(text)
        if 8 <= len(digits) <= 15:
            yield start, start + len(text), "phone", "+" + digits


def _cards(probe: str) -> Iterator[Span]:
    for m in _DIGIT_GROUPS.finditer(probe):
        if m.end() - m.start() < 13:
            continue  # too short to hold a card number
        groups = [(g.start(), g.end()) for g in _DIGITS.finditer(probe, m.start(), m.end())]
        if re.match(r"[A-Za-z]|[.,][0-9]", probe[m.end() : m.end() + 2]):
            groups.pop()  # the last group is glued to a word or a decimal: not ours
        # Grouped card numbers come in groups of three to six digits: a shorter group
        # ("No 3 4111 1111 ...", "1 2 3 4 ...") is never part of one, and a longer one
        # (the 8-digit head of a UUID, a date) can only be a card on its own.
        segment: list[tuple[int, int]] = []
        for group in [*groups, (0, 0)]:
            size = group[1] - group[0]
            if 3 <= size <= 6:
                segment.append(group)
                continue
            yield from _card_in(probe, segment)
            segment = []
            if size > 6:
                yield from _card_in(probe, [group])


def _card_in(probe: str, groups: list[tuple[int, int]]) -> Iterator[Span]:
    """Luhn-valid windows of whole groups, each the longest from its first group.

    A window holds at most 19 digits, so at most 6 groups: linear in the run's length.
    """
    i = 0
    while i < len(groups):
        best = None
        for j in range(i + 1, min(i + 7, len(groups)) + 1):
            start, end = groups[i][0], groups[j - 1][1]
            digits = _digits(probe[start:end])
            if len(digits) > 19:
                break
            if len(digits) >= 13 and _card_prefix(digits) and _luhn(digits):
                best = (j, start, end, digits)
        if best is None:
            i += 1
            continue
        j, start, end, digits = best
        yield start, end, "card", digits
        i = j


# What each finder needs, in the full-width-made-ASCII probe: an e-mail an "@"; an
# international phone a "+"; every other kind a run of digits joined by single spaces or
# dashes, at least 11 characters from its first digit (``_DIGIT_RUN``), which holds 13
# digits (a card; an ID has 17) or a Chinese mobile's 1[3-9] and 9 more (``_LONG_ENOUGH``).
_DIGIT_RUN = re.compile(r"[0-9][0-9 \-.]{10,}")
_AT_OR_PLUS = re.compile(r"[@+]")
_LONG_ENOUGH = re.compile(rf"[0-9](?:{_GAP}[0-9]){{12}}|1[3-9](?:{_GAP}[0-9]){{9}}")


def _may_hold_personal_data(probe: str) -> bool:
    """False when no finder can match ``probe``: most strings of an event (times, ids,
    counts, order numbers) hold no "@", no "+" and no long run of digits, and running
    every finder over each of them was most of an audit append's time (py-spy on the audit
    service). A scan for runs (C code, a few ns per character) and a closer look at the
    few long ones replace the finders' five passes.

    The test looks at nothing but "@", "+" and runs of digits, spaces and dashes, and
    without context (no look-behind): so False for a text holds for every part of it, and
    for every string JSON-escaped into it (escaping touches none of those characters)."""
    if "@" in probe or "+" in probe:
        return True
    return any(_LONG_ENOUGH.search(run) for run in _DIGIT_RUN.findall(probe))


def _suspect_spots(probe: str) -> list[int]:
    """Where in ``probe`` a finder could match (``_may_hold_personal_data`` is True when
    there is any): each "@" and "+", and the start of each run of digits long enough."""
    spots = [m.start() for m in _AT_OR_PLUS.finditer(probe)] if "@" in probe or "+" in probe else []
    spots.extend(m.start() for m in _DIGIT_RUN.finditer(probe) if _LONG_ENOUGH.search(m.group()))
    return spots


def might_hold_personal_data(text: str) -> bool:
    """Whether ``mask_text`` could change ``text`` or any part of it; False is certain
    (``_may_hold_personal_data``), True only says the finders must look. One call over
    many texts joined by a character outside digits, spaces, dashes, "@" and "+" (a NUL,
    say) answers for each of them: a run never crosses it."""
    return _may_hold_personal_data(_to_probe(text))


# In this order: an e-mail may hold a phone number, an ID is longer than a phone, and a
# phone must not be read as part of a card.
_FINDERS: tuple[Callable[[str], Iterator[Span]], ...] = (
    _emails,
    _cn_ids,
    _cn_mobiles,
    _intl_phones,
    _cards,
)


@functools.lru_cache(maxsize=4096)
def is_sensitive_field(name: str) -> bool:
    """Whether a field of this name holds personal data or a credential (see the module
    docstring for the rule)."""
    parts = [
        word.lower()
        for chunk in re.split(r"[_\-.\s]+", name)
        for word in re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+", chunk)
    ]
    if "_".join(parts) in NOT_PERSONAL:
        return False
    return (
        any(p in SENSITIVE_WORDS for p in parts)
        or any(pair in SENSITIVE_PAIRS for pair in zip(parts, parts[1:], strict=False))
        or any(word in name for word in SENSITIVE_ZH)
    )


class Masker:
    """Masks personal data with a keyed hash; see the module docstring.

    ``persistent`` says whether the secret outlives this process (it came from the
    configuration): tokens of a random secret join only within one process.
    """

    def __init__(self, secret: bytes, *, persistent: bool = True) -> None:
        if not secret:
            raise ValueError("the masker needs a non-empty secret")
        self._secret = bytes(secret)
        self.persistent = persistent

    def __repr__(self) -> str:
        return f"Masker(persistent={self.persistent})"  # never the secret

    def token(self, kind: str, normalised: str) -> str:
        """The token of an already normalised value."""
        digest = hmac.digest(self._secret, f"{kind}:{normalised}".encode(), hashlib.sha256)
        return f"[{kind}:{digest[:4].hex()}]"

    def mask_text(self, text: str) -> str:
        """The text with every e-mail, ID, phone and card number replaced by its token."""
        if not text:
            return text
        probe = _to_probe(text)
        if not _may_hold_personal_data(probe):
            return text
        spans: list[Span] = []
        for find in _FINDERS:
            found = list(find(probe))
            if found:
                spans.extend(found)
                probe = _blank(probe, found)
        if not spans:
            return text
        spans.sort()
        out, at = [], 0
        for start, end, kind, value in spans:
            out.append(text[at:start])
            out.append(self.token(kind, value))
            at = end
        out.append(text[at:])
        return "".join(out)

    def mask_value(self, value: Any) -> Any:
        """JSON-like data with its strings masked and sensitive fields masked whole.

        Dicts become dicts (their keys masked too: a map may be keyed by e-mail), lists
        and tuples become lists. A number shaped like a phone, ID or card becomes its
        token, a string. Other objects are masked as their ``str``.
        """
        if isinstance(value, Mapping):
            masked: dict[Any, Any] = {}
            for k, v in value.items():
                key = self.mask_text(k) if isinstance(k, str) else k
                # Two keys that mask alike ("13800138000", "138-0013-8000") must not lose a
                # value: the later ones get "#2", "#3", ... after the token.
                if key in masked:
                    key = next(
                        f"{key}#{n}" for n in itertools.count(2) if f"{key}#{n}" not in masked
                    )
                masked[key] = (
                    self._whole(v) if isinstance(k, str) and is_sensitive_field(k) else
                    self.mask_value(v)
                )  # fmt: skip
            return masked
        if isinstance(value, list | tuple):
            if all(type(v) is str for v in value):  # ids, names: one pass over them all
                return self.mask_texts(value)
            return [self.mask_value(v) for v in value]
        if isinstance(value, str):
            return self.mask_text(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return self._number(value)
        return self.mask_text(str(value))

    def mask_texts(self, texts: Sequence[str]) -> list[str]:
        """``mask_text`` of each text. Texts with nothing to mask (the usual case where the
        data was masked before, as every service's events are) are told apart in one pass
        over all of them instead of one per text: only the texts holding a spot where a
        finder could match are masked."""
        masked = list(texts)
        probe = _to_probe(_APART.join(masked))
        spots = _suspect_spots(probe)
        if spots:
            ends = list(itertools.accumulate(len(text) + 1 for text in masked))
            for index in {bisect.bisect_right(ends, spot) for spot in spots}:
                masked[index] = self.mask_text(masked[index])
        return masked

    def mask_json(self, values: Sequence[Any]) -> list[str]:
        """``canonical_json(self.mask_value(value))`` of each value, the same text. A value
        that is plain JSON data whose sensitive fields hold tokens already (or nothing) and
        whose JSON text holds nothing a finder could match (``_may_hold_personal_data``: a
        False for the text holds for every key and string in it) is its own masked form, so
        it is not walked again; the texts of all values are looked at in one pass."""
        plain = [_fields_masked(value) for value in values]
        texts = [canonical_json(v) if ok else "" for v, ok in zip(values, plain, strict=True)]
        if all(plain) and not might_hold_personal_data(_APART.join(texts)):
            return texts
        return [
            text
            if ok and not might_hold_personal_data(text)
            else canonical_json(self.mask_value(v))
            for v, ok, text in zip(values, plain, texts, strict=True)
        ]

    def bounded(self, text: str, limit: int = 512) -> str:
        """``text`` masked, then cut to at most ``limit`` characters ("…" included)."""
        return _cut(self.mask_text(text), limit)

    def bounded_answer(self, text: str, limit: int = 512) -> str:
        """A receiver's answer for a receipt: a JSON object or array is masked field by
        field (so sensitive field names count too), anything else as text; then cut."""
        try:
            value = json.loads(text)
        except ValueError:
            return self.bounded(text, limit)
        if not isinstance(value, dict | list):
            return self.bounded(text, limit)
        masked = json.dumps(self.mask_value(value), ensure_ascii=False)
        return _cut(masked, limit)

    def _number(self, value: int | float) -> Any:
        if isinstance(value, float) and not value.is_integer():
            return value
        # The sign is not part of a number's digits: mask_text("-13800138000") masks them.
        whole = abs(int(value))
        if not 10**9 <= whole < 10**20:  # no kind we mask is this short or long
            return value
        if isinstance(value, float) and whole > _EXACT_DOUBLE:
            # A double this large is a rounded integer (every JSON number in a Struct is a
            # double): a resident ID or card sent as a number has lost its check digit but
            # still shows its first 16 digits. Its exact value is gone anyway.
            return self.token("field", str(whole))
        masked = self.mask_text(str(whole))
        return masked if TOKEN.fullmatch(masked) else value

    def _whole(self, value: Any) -> Any:
        """A sensitive field's value, masked as one item."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            if TOKEN.fullmatch(value):
                return value  # masked already: masking twice changes nothing
            text = " ".join(value.split())
        elif isinstance(value, int):
            text = str(value) if value.bit_length() < 10_000 else hex(value)  # str() has a cap
        elif isinstance(value, float):
            text = str(int(value)) if value.is_integer() else repr(value)
        else:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
        masked = self.mask_text(text)
        return masked if TOKEN.fullmatch(masked) else self.token("field", text)


# The largest integer a double holds exactly; past it, whole doubles are rounded.
_EXACT_DOUBLE = 2**53

# Joins texts for one pass of ``might_hold_personal_data``: no run of digits crosses it.
_APART = "\x00"


def _fields_masked(value: Any) -> bool:
    """Whether ``value`` is plain JSON data (dicts with text keys, lists, text, numbers,
    true/false/null) in which every sensitive field already holds what ``Masker._whole``
    leaves as it is: a token, null, true or false."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if is_sensitive_field(key):
                if not (
                    item is None
                    or type(item) is bool
                    or (type(item) is str and TOKEN.fullmatch(item) is not None)
                ):
                    return False
            elif type(item) not in _PLAIN_LEAVES and not _fields_masked(item):
                return False
        return True
    if kind is list or kind is tuple:
        return all(type(item) in _PLAIN_LEAVES or _fields_masked(item) for item in value)
    return kind in _PLAIN_LEAVES


_PLAIN_LEAVES = frozenset({str, int, float, bool, type(None)})


def _blank(probe: str, spans: list[Span]) -> str:
    parts, at = [], 0
    for start, end, _kind, _value in sorted(spans):
        parts.append(probe[at:start])
        parts.append(_BLANK * (end - start))
        at = end
    parts.append(probe[at:])
    return "".join(parts)


def _cut(masked: str, limit: int) -> str:
    """Cuts masked text on a character boundary, never inside a token."""
    if len(masked) <= limit:
        return masked
    if limit <= 0:
        return ""
    cut = limit - len(ELLIPSIS)
    # A token crossing the cut goes whole; a partial token would hide nothing and
    # look like a broken one.
    longest = len("[cn_id:00000000]")
    for m in TOKEN.finditer(masked, max(0, cut - longest), cut + longest):
        if m.start() < cut < m.end():
            cut = m.start()
            break
    return masked[:cut] + ELLIPSIS


def masker_from_env(env: Mapping[str, str]) -> Masker:
    """The masker configured by ``REACHSTORE_PII_SECRET``.

    Set, it must hold at least 16 bytes (UTF-8). Unset or empty, the masker gets a random
    secret and ``persistent=False``: its tokens join only within this process. Whether a
    secret kept in the data folder should take its place is for the caller to decide.
    """
    raw = env.get("REACHSTORE_PII_SECRET", "")
    if not raw:
        return Masker(secrets.token_bytes(32), persistent=False)
    secret = raw.encode()
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"REACHSTORE_PII_SECRET must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}"
        )
    return Masker(secret)


_default: Masker | None = None


def default_masker() -> Masker:
    """The process's masker, from the environment, made on first use."""
    global _default
    if _default is None:
        _default = masker_from_env(os.environ)
    return _default


def bounded(text: str, limit: int = 512, *, masker: Masker | None = None) -> str:
    """``text`` masked (by ``masker``, else the process's), then cut to at most ``limit``
    characters, "…" included. Masking comes first, so a cut never leaves part of an
    unmasked number behind, and a cut never splits a token."""
    return (masker or default_masker()).bounded(text, limit)
