"""Loops by placement mode: `colocated` runs the synchronous loop, `async` the fully async one."""
from launcher._registry import Registry
from launcher.rl.loop_async import run_async
from launcher.rl.loop_sync import run_sync

LOOPS: Registry = Registry("loop")
LOOPS.register("colocated")(run_sync)
LOOPS.register("async")(run_async)
