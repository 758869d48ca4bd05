"""The protos' leading comments, read from the descriptor set that ``make generate`` writes.

protoc leaves comments out of the generated Python descriptors; ``buf build`` keeps them as
source info in ``descriptors.binpb`` next to this module (drift-checked like the generated
code). Comments are looked up by full name: a service, method, message, field or enum, and an
enum value as ``<enum full name>.<VALUE>`` (protobuf scopes a value's own full name beside
its enum, where two enums' values would share one namespace).

A missing or unreadable file leaves every comment empty: the OpenAPI document then lacks
descriptions, never paths or schemas.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TypeAlias

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    EnumValueDescriptor,
    FieldDescriptor,
    MethodDescriptor,
    ServiceDescriptor,
)
from google.protobuf.message import DecodeError

__all__ = ["ProtoComments", "bundled_comments", "read_comments"]

logger = logging.getLogger(__name__)

DESCRIPTOR_SET = "descriptors.binpb"
# Field numbers in descriptor.proto that make up a source location's path.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM = 2, 3, 4
_ENUM_VALUE = 2
_SERVICE_METHOD = 2
_LIST_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s")
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?=\s+[A-Z`]|$)", re.DOTALL)

Described: TypeAlias = (
    Descriptor | FieldDescriptor | EnumDescriptor | ServiceDescriptor | MethodDescriptor
)


def _tidy(raw: str) -> str:
    """A comment as prose: wrapped lines joined, paragraphs and list items kept apart."""
    paragraphs: list[list[str]] = [[]]
    for line in raw.splitlines():
        text = line.strip()
        if not text:
            paragraphs.append([])
        elif _LIST_ITEM.match(text) and paragraphs[-1]:
            paragraphs[-1].append("\n" + text)
        else:
            paragraphs[-1].append(text)
    joined = (" ".join(words).replace(" \n", "\n") for words in paragraphs if words)
    return "\n\n".join(joined)


@dataclasses.dataclass(frozen=True)
class ProtoComments:
    """Leading comments by full name; an element without one answers ``""``."""

    by_name: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def of(self, element: Described) -> str:
        return self.by_name.get(element.full_name, "")

    def of_value(self, value: EnumValueDescriptor) -> str:
        return self.by_name.get(f"{value.type.full_name}.{value.name}", "")

    def summary(self, element: Described) -> str:
        """The first sentence of the element's comment (all of its first paragraph at most)."""
        first = self.of(element).split("\n\n", 1)[0]
        match = _FIRST_SENTENCE.match(first)
        return match.group(1) if match else first

    @classmethod
    def from_descriptor_set(cls, data: bytes) -> ProtoComments:
        files = descriptor_pb2.FileDescriptorSet.FromString(data).file
        comments: dict[str, str] = {}
        for file in files:
            leading = {
                tuple(location.path): _tidy(location.leading_comments)
                for location in file.source_code_info.location
                if location.leading_comments.strip()
            }
            for path, name in _named_paths(file):
                if path in leading:
                    comments[name] = leading[path]
        return cls(comments)


def _named_paths(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[tuple[int, ...], str]]:
    """(source location path, full name) for every element of ``file`` that has a name."""
    prefix = f"{file.package}." if file.package else ""
    for index, message in enumerate(file.message_type):
        yield from _message_paths(message, (_FILE_MESSAGE, index), prefix + message.name)
    for index, enum in enumerate(file.enum_type):
        yield from _enum_paths(enum, (_FILE_ENUM, index), prefix + enum.name)
    for index, service in enumerate(file.service):
        path, name = (_FILE_SERVICE, index), prefix + service.name
        yield path, name
        for m_index, method in enumerate(service.method):
            yield (*path, _SERVICE_METHOD, m_index), f"{name}.{method.name}"


def _message_paths(
    message: descriptor_pb2.DescriptorProto, path: tuple[int, ...], name: str
) -> Iterator[tuple[tuple[int, ...], str]]:
    yield path, name
    for index, field in enumerate(message.field):
        yield (*path, _MESSAGE_FIELD, index), f"{name}.{field.name}"
    for index, nested in enumerate(message.nested_type):
        yield from _message_paths(nested, (*path, _MESSAGE_NESTED, index), f"{name}.{nested.name}")
    for index, enum in enumerate(message.enum_type):
        yield from _enum_paths(enum, (*path, _MESSAGE_ENUM, index), f"{name}.{enum.name}")


def _enum_paths(
    enum: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...], name: str
) -> Iterator[tuple[tuple[int, ...], str]]:
    yield path, name
    for index, value in enumerate(enum.value):
        yield (*path, _ENUM_VALUE, index), f"{name}.{value.name}"


def read_comments(source: Traversable) -> ProtoComments:
    """The comments in the descriptor set at ``source``; none, with a warning, if unreadable."""
    try:
        return ProtoComments.from_descriptor_set(source.read_bytes())
    except (OSError, DecodeError) as exc:
        logger.warning(
            "no proto comments for the OpenAPI document: %s unreadable (%s); run 'make generate'",
            source,
            exc,
        )
        return ProtoComments()


@functools.cache
def bundled_comments() -> ProtoComments:
    """The comments shipped with the bridge (read once)."""
    return read_comments(resources.files("reachstore_server.bridge") / DESCRIPTOR_SET)
