"""What the benchmarks share: process groups, models built on the GPU, engine processes, the
parity criterion.

GPU tests (tests/gpu) and the parity unit tests use it too; nothing here imports from tests/."""
