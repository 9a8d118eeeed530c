"""A time limit around one reward call, so that no response can stall the driver.

On the main thread (where both loops score) the limit is SIGALRM through setitimer: it
interrupts pure-Python code (sympy included) where it is, costs two syscalls per call, and
re-fires every REFIRE_S until disarmed in case some library swallows the first interrupt.
A timer that was already running (pytest-timeout, a caller's own alarm) is put back with
what it had left. Off the main thread signals cannot be used: the call runs in a daemon
thread that is waited for `timeout_s` and abandoned after (it cannot be killed; the caller
goes on). math-verify's own timeouts use signal.alarm, which would cancel this timer, so
rewards.py turns them off while `armed()`.

RewardTimeout is a BaseException, like math-verify's TimeoutException: `except Exception`
in a library or a user's reward cannot swallow it.
"""
import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
REFIRE_S = 0.5


class RewardTimeout(BaseException):
    """The reward call ran past its time limit."""


_armed = False


def armed() -> bool:
    """True while a SIGALRM deadline of this module is running on the main thread."""
    return _armed


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_alarm(signum, frame):
    if _armed:
        raise RewardTimeout


def call_with_deadline(fn: Callable[[], T], timeout_s: float) -> T:
    """fn(), or RewardTimeout when it runs longer than timeout_s seconds."""
    if not on_main_thread() or not hasattr(signal, "setitimer"):
        return _call_in_thread(fn, timeout_s)
    if _armed:  # nested: the outer deadline already covers this call
        return fn()
    return _call_with_alarm(fn, timeout_s)


def _call_with_alarm(fn: Callable[[], T], timeout_s: float) -> T:
    global _armed
    previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    started = time.monotonic()
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, timeout_s, REFIRE_S)
    _armed = True
    try:
        return fn()
    finally:
        _armed = False  # first: an alarm arriving from here on raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:  # someone else's timer: give it back what it had left (at least 1 ms)
            left = max(previous_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, previous_interval)


def _call_in_thread(fn: Callable[[], T], timeout_s: float) -> T:
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = err

    worker = threading.Thread(target=target, name="reward-call", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardTimeout
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
