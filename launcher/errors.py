"""The error type for input the launcher refuses before anything starts.

A ConfigError carries findings (the validator's dict shape: id, severity, key, message,
why, fix) so composition failures and rule failures print and serialise the same way.
"""
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    key: str
    message: str
    why: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


class ConfigError(Exception):
    """Raised when a config cannot be composed; exit code 2."""

    def __init__(self, findings: list[Finding]):
        super().__init__("; ".join(f.message for f in findings))
        self.findings = findings
