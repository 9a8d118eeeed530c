"""The run's records on disk: the run directory and its lock, checkpoints, metrics rows and
plots, the phase file, sampled sequences. The lowest wing: the Ray side and the step loop
write through it, it imports neither."""
