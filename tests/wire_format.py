"""Protobuf wire bytes written by hand, for requests no generated class would produce
(unknown fields, fields cut short)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def length_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, payload."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload
