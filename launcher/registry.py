"""The one registry form: `@REG.register("name")`; duplicates raise, a miss lists known names.

Backends, algorithms, tasks and loops register under short names so core code looks them
up by the config's value and never imports an implementation by name; validator rules
register under their ids (launcher/validate/registry.py).
"""
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(LookupError):
    """A name that nothing registered; the message lists the names that are."""


class Registry(Generic[T]):
    def __init__(self, kind: str, discover: Callable[[str | None], None] | None = None):
        """`discover(name)` imports whatever registers `name` (None: everything)."""
        self.kind = kind
        self._items: dict[str, T] = {}
        self._discover = discover

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice ({self._items[name]!r} and {item!r})")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        for hint in (name, None):  # cheap targeted discovery first, then everything
            if name not in self._items and self._discover is not None:
                self._discover(hint)
        if name not in self._items:
            known = ", ".join(sorted(self._items)) or "none"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}")
        return self._items[name]

    def names(self) -> list[str]:
        if self._discover is not None:
            self._discover(None)
        return sorted(self._items)

    def values(self) -> list[T]:
        """Every registered item, in name order: for callers that run them all (the rules)."""
        return [self._items[name] for name in self.names()]

    def __iter__(self) -> Iterator[str]:
        """`set(REG)`, `name in REG`: the names, like a dict's keys, after discovery."""
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.names()
