"""RL: algorithms (GRPO, DAPO), tasks and rewards, data, the sync and async loops.

Read in this order: algorithm.py (the interface), grpo.py and dapo.py (the maths),
tasks.py/rewards.py (scoring), loop_sync.py and loop_async.py (the loops), weight_sync.py
(streaming the trainer's weights to the engines after each step).
"""
