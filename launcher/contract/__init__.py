"""What the driver and the workers agree on: wire dataclasses, backend Protocols, the actor spec."""
