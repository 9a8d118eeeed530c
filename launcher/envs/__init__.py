"""Environments for multi-turn tool-use RL, in SkyRL-Gym's BaseTextEnv interface (duck-typed:
the launcher does not depend on skyrl-gym).

A run names one in YAML, as `data.environment.cls: "launcher.envs.code_math:CodeMathEnv"`. The driver's
episode loop (launcher/driver/loop/episodes.py) builds one per sample as
Class(data.environment.config, extras), calls init(prompt_messages), then step(model_text) once per model
turn until the env says done or the turn or token budget runs out, and reads get_metrics() at the
end. sandbox.py runs the model's Python for the envs that give it a code tool.
"""
