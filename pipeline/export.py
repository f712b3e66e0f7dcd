"""SavedModel export for serving: raw strings in, class probabilities out.

    python -m pipeline.export --model-dir DIR [--export-dir DIR]

re-exports a trained model from its best weights (or, failing those, its
latest checkpoint) as `EXPORT_DIR/<version>/`, the layout TF Serving reads.
The tokenizer runs inside the serving graph, so clients send text; loading
the SavedModel needs `import tensorflow_text` first (its ops are in the graph).
"""

import argparse
import os

import tensorflow as tf

from pipeline.model import model_internals
from pipeline.model_dir import restore_model

EXPORT_DIR = "export"


class ServingModule(tf.Module):
    """Tokenizer, model and label names, with the two serving signatures."""

    def __init__(self, model, tokenizer, label_names):
        super().__init__(name="serving")
        self.model = model
        self.tokenizer = tokenizer
        # A variable, so the SavedModel keeps it as `loaded.label_names`.
        self.label_names = tf.Variable(list(label_names), trainable=False, name="label_names")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        probabilities = tf.cast(self.model(self.tokenizer(text), training=False), tf.float32)
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_id": label_id,
                "label": tf.gather(self.label_names, label_id)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def attention(self, text):
        ids = self.tokenizer(text)
        internals = model_internals(self.model, ids)
        return {"attention": tf.cast(internals["attention"], tf.float32),  # (batch, layers, heads, L, L)
                "tokens": self.tokenizer.tokens(ids), "token_ids": ids,
                "probabilities": tf.cast(internals["probabilities"], tf.float32)}


def next_version(export_root):
    """One more than the largest integer version under `export_root`, or 1."""
    if not os.path.isdir(export_root):
        return 1
    versions = [int(name) for name in os.listdir(export_root) if name.isdigit()]
    return max(versions, default=0) + 1


def export_saved_model(model, tokenizer, label_names, export_root, version=None):
    """Writes `export_root/<version>/` and returns its path."""
    version = next_version(export_root) if version is None else int(version)
    path = os.path.join(export_root, str(version))
    if os.path.exists(path):
        raise ValueError(f"{path} exists already; choose another version")
    module = ServingModule(model, tokenizer, label_names)
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.serve.get_concrete_function(),
        "attention": module.attention.get_concrete_function(),
    })
    return path


def latest_export(path):
    """`path` itself if it is a SavedModel, else its highest numbered version."""
    if tf.saved_model.contains_saved_model(path):
        return path
    version = next_version(path) - 1
    if version < 1:
        raise ValueError(f"{path}: neither a SavedModel nor a folder of numbered versions")
    return os.path.join(path, str(version))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Re-export a trained model as a serving SavedModel.")
    parser.add_argument("--model-dir", required=True, help="directory of a pipeline.train run")
    parser.add_argument("--export-dir", help="export root (default MODEL_DIR/export)")
    parser.add_argument("--version", type=int, help="version number (default: next free one)")
    args = parser.parse_args(argv)
    model, tokenizer, names = restore_model(args.model_dir)
    root = args.export_dir or os.path.join(args.model_dir, EXPORT_DIR)
    print(export_saved_model(model, tokenizer, names, root, args.version))


if __name__ == "__main__":
    main()
