"""SavedModel export for serving: raw strings in, class probabilities (or a regression's scores) out.

    python -m pipeline.export --model-dir DIR [DIR ...] [--export-dir DIR]

re-exports a trained model from its best weights (or, failing those, its
latest checkpoint) as `EXPORT_DIR/<version>/`, the layout TF Serving reads.
Several model directories export one ensemble: the mean of their
probabilities, behind the same signatures; the runs must share vocabulary,
tokenizer settings and labels (train them with `--vocabulary-from`). A run
trained with `--members N` exports with its members, as it did when trained.
The tokenizer runs inside the serving graph, so clients send text; loading
the SavedModel needs `import tensorflow_text` first (its ops are in the graph).
"""

import argparse
import os
import sys

import tensorflow as tf

from pipeline.labels import load_thresholds
from pipeline.layout import EXPORT_DIR
from pipeline.model import model_internals, takes_pairs
from pipeline.model_dir import member_dirs, restore_model

TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")  # a pair model's second texts


class ServingModule(tf.Module):
    """Tokenizer, model(s) and label names, with the two serving signatures.

    `models` is one model or a list of them, an ensemble sharing the
    tokenizer: `serve` returns the mean of their probabilities (with the
    most probable class; of a multi-label task, with `over_threshold`, each
    label's probability reaching its one of `thresholds`), or of a
    regression's scores (`score`, `(batch,)`); of a model of pairs of texts
    (`model.segments`), both take `text` and `text_pair`;
    `attention` their maps one member after the other along the layer axis
    (member `m`'s layer `i` at `m * num_layers + i`).
    """

    def __init__(self, models, tokenizer, label_names, thresholds=None):
        super().__init__(name="serving")
        self._hold(list(models) if isinstance(models, (list, tuple)) else [models])
        # The signatures capture the models' variables, so those are what the
        # SavedModel must hold; the Keras objects stay out of its object
        # graph, whose save looks up every attribute of every layer (tests'
        # model: 2.0 -> 1.25 s an export).
        self.model_variables = [variable for model in self.models for variable in model.variables]
        heads = {model.get_layer("encoder").num_heads for model in self.models}
        if len(heads) > 1:
            raise ValueError(
                f"ensemble members have {sorted(heads)} attention heads; the attention "
                "signature stacks their maps, which needs one head count"
            )
        self.tokenizer = tokenizer
        self.pairs = takes_pairs(self.models[0])
        activation = self.models[0].get_layer("head").activation
        self.regression = activation == "linear"
        self.thresholds = None
        if activation == "sigmoid":
            if thresholds is None or len(thresholds) != len(label_names):
                raise ValueError(f"a multi-label model exports with a threshold per label, got {thresholds}")
            self.thresholds = tf.Variable(thresholds, dtype=tf.float32, trainable=False, name="thresholds")
        # A variable, so the SavedModel keeps it as `loaded.label_names`.
        self.label_names = tf.Variable(list(label_names), trainable=False, name="label_names")

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def _hold(self, models):
        self.models = models  # untracked

    def _ids(self, text, text_pair=None):
        # The tokenizer's one traced function, which both signatures (and training's input) call.
        if text_pair is None:
            return self.tokenizer.traced()(text)
        return self.tokenizer.traced(pairs=True)(text, text_pair)

    def serve(self, text, text_pair=None):
        ids = self._ids(text, text_pair)
        probabilities = _mean([tf.cast(model(ids, training=False), tf.float32) for model in self.models])
        if self.regression:
            return {"score": probabilities[:, 0]}
        if self.thresholds is not None:
            return {"probabilities": probabilities, "over_threshold": probabilities >= self.thresholds}
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_id": label_id, "label": tf.gather(self.label_names, label_id)}

    def attention(self, text, text_pair=None):
        ids = self._ids(text, text_pair)
        internals = [model_internals(model, ids) for model in self.models]
        attention = tf.concat([tf.cast(i["attention"], tf.float32) for i in internals], axis=1)
        outputs = _mean([tf.cast(i["probabilities"], tf.float32) for i in internals])
        return {
            "attention": attention,  # (batch, members x layers, heads, L, L)
            "tokens": self.tokenizer.tokens(ids),
            "token_ids": ids,
            **({"score": outputs[:, 0]} if self.regression else {"probabilities": outputs}),
        }


def _mean(tensors):
    return tensors[0] if len(tensors) == 1 else tf.add_n(tensors) / len(tensors)


def next_version(export_root):
    """One more than the largest integer version under `export_root`, or 1."""
    if not tf.io.gfile.isdir(export_root):
        return 1
    names = [name.rstrip("/") for name in tf.io.gfile.listdir(export_root)]  # a bucket's folders end in /
    versions = [int(name) for name in names if name.isdigit()]
    return max(versions, default=0) + 1


def export_saved_model(model, tokenizer, label_names, export_root, version=None, thresholds=None):
    """Writes `export_root/<version>/` and returns its path.

    `model`: a model, or a list of models served as their ensemble;
    `thresholds`: a multi-label model's, one per label.
    """
    version = next_version(export_root) if version is None else int(version)
    path = os.path.join(export_root, str(version))
    if tf.io.gfile.exists(path):
        raise ValueError(f"{path} exists already; choose another version")
    module = ServingModule(model, tokenizer, label_names, thresholds)
    # Traced once, as signatures only: the methods made `tf.function`s of the
    # module would each be traced again for the file (the tests' tiny model:
    # 3.15 -> 2.15 s an export, means of 8 alternated; the SavedModel's
    # interface is its signatures).
    inputs = [TEXT, TEXT_PAIR] if module.pairs else [TEXT]
    signatures = {
        name: tf.function(method, input_signature=inputs, autograph=False).get_concrete_function()
        for name, method in (("serving_default", module.serve), ("attention", module.attention))
    }
    tf.saved_model.save(module, path, signatures=signatures)
    return path


def latest_export(path):
    """`path` itself if it is a SavedModel, else its highest numbered version."""
    if tf.saved_model.contains_saved_model(path):
        return path
    version = next_version(path) - 1
    if version < 1:
        raise ValueError(f"{path}: neither a SavedModel nor a folder of numbered versions")
    return os.path.join(path, str(version))


def restore_ensemble(model_dirs):
    """`(models, tokenizer, label_names)` of runs that tokenize and label alike.

    Averaging probabilities is only meaningful when every member reads the
    same ids and numbers the classes the same way, so any difference in
    vocabulary, tokenizer settings or label names is an error naming the run.
    """
    models, tokenizer, names = [], None, None
    for model_dir in model_dirs:
        model, member_tokenizer, member_names = restore_model(model_dir)
        if tokenizer is None:
            tokenizer, names = member_tokenizer, member_names
        elif member_tokenizer.vocabulary != tokenizer.vocabulary:
            raise ValueError(
                f"{model_dir}: its vocabulary differs from {model_dirs[0]}'s; train ensemble "
                f"members with --vocabulary-from {model_dirs[0]}"
            )
        elif member_tokenizer.settings != tokenizer.settings:
            raise ValueError(
                f"{model_dir}: tokenizer settings {member_tokenizer.settings} differ from "
                f"{model_dirs[0]}'s {tokenizer.settings}"
            )
        elif member_names != names:
            raise ValueError(f"{model_dir}: labels {member_names} differ from {model_dirs[0]}'s {names}")
        models.append(model)
    return models, tokenizer, names


def run_thresholds(model_dir, model, names):
    """The thresholds a multi-label `model` of the run in `model_dir`
    exports with (`thresholds.json`), in `names` order; None for a model of
    another task."""
    return load_thresholds(model_dir, names) if model.get_layer("head").activation == "sigmoid" else None


def main(argv=None):
    parser = argparse.ArgumentParser(description="Re-export a trained model as a serving SavedModel.")
    parser.add_argument(
        "--model-dir",
        required=True,
        nargs="+",
        help="directory of a pipeline.train run; several export their ensemble (the mean of their probabilities; "
        "of multi-label runs, with the first one's thresholds)",
    )
    parser.add_argument("--export-dir", help="export root (default MODEL_DIR/export; required for an ensemble)")
    parser.add_argument("--version", type=int, help="version number (default: next free one)")
    args = parser.parse_args(argv)
    if len(args.model_dir) > 1 and not args.export_dir:
        parser.error("an ensemble of several --model-dir needs --export-dir")
    try:  # a run with train.members brings its members
        models, tokenizer, names = restore_ensemble([d for given in args.model_dir for d in member_dirs(given)])
        thresholds = run_thresholds(args.model_dir[0], models[0], names)
    except ValueError as error:
        sys.exit(f"error: {error}")
    root = args.export_dir or os.path.join(args.model_dir[0], EXPORT_DIR)
    print(export_saved_model(models, tokenizer, names, root, args.version, thresholds))


if __name__ == "__main__":
    main()
