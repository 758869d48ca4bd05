"""Listings as iterators: pages are fetched as the iteration reaches them.

A listing is described once, as "the operation that fetches the page after this token";
the synchronous client walks it with ``iterate`` and the asynchronous one with
``aiterate``. Errors therefore surface while iterating, at the page that failed, and a
caller that stops early never fetches the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

from reachstore._flow import Flow

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Page(Generic[_T]):
    items: list[_T]
    # Empty on the last page.
    next_token: str


# token -> the operation that fetches that page ("" is the first page)
Pages = Callable[[str], Flow[Page[_T]]]


def iterate(run: Callable[[Flow[Any]], Any], pages: Pages[_T]) -> Iterator[_T]:
    token = ""
    while True:
        page: Page[_T] = run(pages(token))
        yield from page.items
        if not page.next_token:
            return
        token = page.next_token


async def aiterate(
    run: Callable[[Flow[Any]], Awaitable[Any]], pages: Pages[_T]
) -> AsyncIterator[_T]:
    token = ""
    while True:
        page: Page[_T] = await run(pages(token))
        for item in page.items:
            yield item
        if not page.next_token:
            return
        token = page.next_token
