"""Errors a worker raises and the driver tells apart: which checkpoint failures a fallback to
an older checkpoint can cure (damage) and which it cannot (another run's checkpoint), and an
actor lost while another actor waited on it."""


class PeerLostError(RuntimeError):
    """An actor that another actor waited on died or answered nothing within the deadline the
    driver handed down (trainer rank 0 waiting on the engines in a GPU weight transfer); the
    message names it and the call. The driver reports it as the lost actor, not a traceback."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (no space, a failed write) or read."""


class DamagedCheckpointError(CheckpointError):
    """A file of a checkpoint is missing, cut short or unreadable; the message names it."""


class CheckpointMismatchError(ValueError):
    """A trainer's checkpoint is sound but belongs to another run (other base model, LoRA
    settings, kind or architecture): falling back to an older checkpoint of the same run
    cannot help, so restore() never does. Raised by the trainer backends."""
