"""The Python API: train a classifier, and load an export to classify with.

    from pipeline.api import load_classifier, train

    report = train("runs/mine", "data/train.csv", "data/test.csv", config={"train": {"epochs": 5}})
    print(report["accuracy"], report["macro_f1"])
    classifier = load_classifier("runs/mine")
    classifier(["a sentence to classify"])            # probabilities, (texts, classes); a regression's scores
    classifier.classify(["a sentence to classify"])   # [{"text", "label", "probabilities"}]

`train` is `python -m pipeline.train`: the same stages, defaults, files and
resumption; `load_classifier` serves what it exported.
"""

from pipeline.config import Config, override
from pipeline.predict import Classifier, load_classifier
from pipeline.strategy import resolve_strategy, run_config
from pipeline.train import train_and_evaluate

__all__ = ["Classifier", "load_classifier", "train"]


def train(model_dir, train_files=None, eval_files=None, config=None, tpu=None, unlabelled_files=None):
    """Trains, scores and exports a classifier in `model_dir`; returns the
    report written to its `metrics.json` (accuracy, macro_f1, loss, per
    class; of a multi-label task, `config` `{"data": {"task":
    "multi_label"}}`: micro_f1, macro_f1, exact_match, loss, thresholds, per
    label; of a regression, `"regression"`: rmse, mae, pearson, spearman,
    loss). Pairs of texts: `{"data": {"text_pair_column": NAME}}`.

    Args:
        model_dir: the run's directory (a local path or `gs://`); a run found
            there resumes, or is found done.
        train_files, eval_files: paths, globs or comma-separated lists of
            CSV, TSV, JSONL or TFRecord files; the demo corpus without them.
        config: a `Config`, a dict of fields over the defaults
            (`{"train": {"epochs": 5}}`), or the path of a JSON file of them.
        tpu: "local" (a TPU VM's own chips) or a TPU's name: train under
            `TPUStrategy`, from the TPU defaults.
        unlabelled_files: files of unlabelled text, as `train_files` (or
            plain text; labels ignored), streamed into the pre-training
            with the training texts (`pretrain.unlabelled`).
    """
    strategy = resolve_strategy(tpu)
    if not isinstance(config, Config):
        path, overrides = (config, {}) if isinstance(config, str) else (None, config or {})
        config = run_config(path, overrides, strategy, tpu)
    if unlabelled_files:
        files = unlabelled_files if isinstance(unlabelled_files, str) else ",".join(unlabelled_files)
        config = override(config, {"pretrain": {"unlabelled": files}})
    return train_and_evaluate(config, model_dir, train_files, eval_files, tpu, strategy=strategy)
