"""What the benchmarks share: process groups, models built on the GPU, engine processes.

GPU tests (tests/gpu) use it too; nothing here imports from tests/."""
