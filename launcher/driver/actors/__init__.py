"""The Ray side: the cluster (embedded or joined) and its processes, placement on the plan's
slots, the trainer and engine groups with their deadlines and error reports, the start-up
board, and the one bring-up (session.py) that a run, `export` and `eval` share."""
