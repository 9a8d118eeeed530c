"""Where rank 0 hosts the trainer process group: its node's IP and a free port.

Shared by every trainer backend (hf, megatron) so the rendezvous works the same way.
"""
import socket


def free_address() -> tuple[str, int]:
    import ray

    with socket.socket() as sock:
        sock.bind(("", 0))
        return ray.util.get_node_ip_address(), sock.getsockname()[1]
