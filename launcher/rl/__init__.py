"""RL maths the driver and the workers share: algorithms (GRPO, DAPO), advantages and
losses, tasks and rewards, prompts and the tokenizer.

Read in this order: algorithm.py (the interface), grpo.py and dapo.py (the maths),
tasks.py/rewards.py (scoring). The loops that use them are in launcher/driver.
"""
