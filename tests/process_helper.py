"""Helpers of the tests that start several processes on 127.0.0.1."""

import random
import socket


def free_ports(count):
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    Drawn below the kernel's ephemeral range. A port that binding port 0
    hands out comes from that range, where the connections the processes
    then open to each other also take their local ports: one of those could
    take it before the server meant to listen on it binds it, and that
    server's process then fails while the others wait for it.
    """
    ephemeral_low = 32768  # Linux's default; the kernel's own setting where it is readable
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    candidates = random.Random().sample(range(10_000, ephemeral_low), 200)
    ports = []
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"no {count} free ports among 200 tried below {ephemeral_low}")


def free_port():
    """One port of `free_ports`."""
    return free_ports(1)[0]
