"""A trainer checkpoint's integrity record: the size and crc32 of every file a rank wrote.

    <checkpoint>/integrity/rank<r>.json      {file name: {"bytes": n, "crc32": c}} of rank r's files

A loader's own checks see only what breaks its format: a torch.load or DCP read of a file
with a flipped byte in the middle of a tensor succeeds and trains on the damage. So each
rank lists what it wrote right after writing it, and a loader compares every file against
the list before reading it; a mismatch names the file. The Megatron and hf trainers both
write and check this record (megatron/checkpoint.py and checkpoint_files.py, hf/trainer.py).
"""
import json
import os
import zlib
from pathlib import Path

INTEGRITY = "integrity"
CRC_BLOCK = 16 << 20


def crc32(file: Path) -> int:
    crc = 0
    with open(file, "rb") as f:
        while block := f.read(CRC_BLOCK):
            crc = zlib.crc32(block, crc)
    return crc


def write_json(file: str | Path, value) -> None:
    """`value` as JSON at `file`, complete or not at all (a temporary file, fsynced, renamed)."""
    tmp = f"{file}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)


def write_record(folder: str | Path, rank: int, files: list[Path]) -> None:
    """Rank `rank`'s record of `files` (inside `folder`), measured as they are on disk now."""
    listing = {f.name: {"bytes": f.stat().st_size, "crc32": crc32(f)} for f in sorted(files)}
    os.makedirs(Path(folder) / INTEGRITY, exist_ok=True)
    write_json(Path(folder) / INTEGRITY / f"rank{rank}.json", listing)


def has_record(folder: str | Path) -> bool:
    """Whether any rank wrote a record (checkpoints from before the record have none)."""
    return any((Path(folder) / INTEGRITY).glob("rank*.json"))


def read_records(folder: str | Path, ranks: range) -> tuple[dict, list[str]]:
    """(every listed file -> its entry, problems) from the records of `ranks`; a missing or
    unreadable record is a problem naming its file."""
    listed, problems = {}, []
    for rank in ranks:
        file = Path(folder) / INTEGRITY / f"rank{rank}.json"
        try:
            listed.update(json.loads(file.read_text()))
        except (OSError, ValueError) as err:
            problems.append(f"{file} is missing or damaged ({type(err).__name__})")
    return listed, problems


def mismatch(file: Path, entry: dict) -> str | None:
    """Why `file` is not what its writer recorded in `entry`, or None when it is."""
    if not file.is_file():
        return f"{file} is missing"
    if file.stat().st_size != entry["bytes"] or crc32(file) != entry["crc32"]:
        return f"{file} does not match the size and crc32 its writer recorded (damaged)"
    return None
