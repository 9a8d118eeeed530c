"""Provenance of derived values: each is logged once with where it came from."""
from dataclasses import dataclass, field


@dataclass
class Origins:
    lines: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, value, because: str) -> None:
        self.lines[key] = f"{key}={value} from {because}"
