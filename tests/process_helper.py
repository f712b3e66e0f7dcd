"""Helpers of the tests that start several processes on 127.0.0.1."""

import json
import os
import random
import socket
import subprocess
import sys


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


# The export's serving signature, loaded in a process of its own, called with
# the JSON object of its inputs (lists of strings) and printing its outputs
# (strings decoded).
_SERVE = (
    "import json, sys; import tensorflow as tf, tensorflow_text; "
    "serve = tf.saved_model.load(sys.argv[1]).signatures['serving_default']; "
    "out = serve(**{name: tf.constant(texts) for name, texts in json.loads(sys.argv[2]).items()}); "
    "strings = lambda value: value.numpy().astype(str) if value.dtype == tf.string else value.numpy(); "
    "print(json.dumps({name: strings(value).tolist() for name, value in out.items()}))"
)


def serve_in_a_fresh_process(export, **inputs):
    """The outputs (lists) of the SavedModel `export`'s `serving_default`
    signature on `inputs` (`text=[...]`, and `text_pair=[...]` for pairs),
    served by a new Python process, as a server would load it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(
        [sys.executable, "-c", _SERVE, export, json.dumps(inputs)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)
