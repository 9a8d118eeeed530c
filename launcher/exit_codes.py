"""The launcher's exit codes, written once (README's Commands section lists them): every
command returns one of these, so a script or a scheduler can tell a refused config from a
run that failed after it started."""
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    """Done."""
    REFUSED = 1
    """Checks found errors (validate, or a run refused before anything started)."""
    CONFIG = 2
    """The config or the command line cannot be composed or read (a typo, a missing file)."""
    RUN_FAILED = 3
    """The run, export or evaluation failed after it started."""
    PREEMPTED_USR1 = 138
    """SIGUSR1 in run.preemption_signals (what the `sbatch` script forwards ahead of the time limit):
    the run saved what it could and stopped (launcher/driver/loop/preemption.py); the script requeues it."""
    PREEMPTED_USR2 = 140
    """SIGUSR2 in run.preemption_signals: as SIGUSR1."""
    INTERRUPTED = 130
    """Ctrl-C (SIGINT), as a shell reports it: stops at once (a background checkpoint write the
    trainers finish within a few seconds is still completed)."""
    TERMINATED = 143
    """SIGTERM (Slurm, Kubernetes, `kill`): the run saved what it could and stopped, 128 + 15 as
    schedulers expect."""


def of_signal(signum: int) -> ExitCode:
    """The code a run stopped by signal `signum` exits with: 128 + its number, as a shell reports
    a process a signal ended (Slurm's accounting reads 143 as SIGTERM)."""
    return ExitCode(128 + signum)


def unexpected(what: str) -> str:
    """The line after the traceback of an error no command expects (a user's mistake is a message
    without one): says it is a bug, so nobody hunts for it in their config."""
    return (f"{what} failed on an unexpected error (traceback above): a bug of the launcher or a backend, not of "
            "the config; please report it with the traceback")
