"""Loops by placement mode: `colocated` runs the synchronous loop, `async` the fully async one."""
from launcher.driver.loop.loop_async import run_async
from launcher.driver.loop.loop_sync import run_sync
from launcher.registry import Registry

LOOPS: Registry = Registry("loop")
LOOPS.register("colocated")(run_sync)
LOOPS.register("async")(run_async)
