"""Training checkpoint -> an HF folder for serving (`python -m launcher export`)."""
