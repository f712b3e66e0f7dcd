"""A tf.data service dispatcher or worker, for `--data-service`: CPU machines
that read, tokenize, pack and mask the pre-training input when a host's own
CPUs cannot keep up (a TPU pod slice, heavy tokenization).

    python -m pipeline.data_service --port 5050                 # the dispatcher, on one machine
    python -m pipeline.data_service --dispatcher HOST:5050      # a worker, on each CPU machine
    python -m pipeline.pretrain --text FILES ... --data-service grpc://HOST:5050

The workers run the input pipeline's graph, whose tokenizer is tensorflow-text's
ops, so they import tensorflow_text (a bare TensorFlow worker fails with "Op
type not registered"): start them with this module and the same versions as
the training hosts. They read the files themselves: plain text files where
every worker can reach them (gs://, or a disk they share). The dispatcher
hands the files to the workers as they ask for them, so each pass reads
every document once, and the training hosts only fetch finished steps, in
an order that depends on the workers' speed: such a pre-training is not
repeatable step for step, and a resumed one goes on with new draws.
"""

import argparse
import socket

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the workers run)


def dispatcher(port=0):
    """A started dispatcher; its address is `.target` ("grpc://localhost:PORT")."""
    return tf.data.experimental.service.DispatchServer(tf.data.experimental.service.DispatcherConfig(port=port))


def worker(dispatcher_address, port=0, host=None):
    """A started worker of the dispatcher at `dispatcher_address` ("HOST:PORT"),
    telling the training hosts to reach it at `host` (this machine's name by
    default; "localhost" where they all run on this machine)."""
    return tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(
            dispatcher_address=dispatcher_address.removeprefix("grpc://"),
            worker_address=f"{host or socket.gethostname()}:%port%",
            port=port,
        )
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--dispatcher", help="HOST:PORT of the dispatcher: start a worker of it (else a dispatcher)")
    parser.add_argument("--port", type=int, default=0, help="the port to serve on (default: any free one)")
    parser.add_argument("--host", help="a worker's name as the training hosts reach it (default: this machine's)")
    args = parser.parse_args(argv)
    if args.dispatcher:
        server = worker(args.dispatcher, args.port, args.host)
        print(f"tf.data service worker of {args.dispatcher} serving", flush=True)
    else:
        server = dispatcher(args.port)
        print(f"tf.data service dispatcher at {server.target}", flush=True)
    server.join()


if __name__ == "__main__":
    main()
