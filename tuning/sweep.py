"""KerasTuner sweeps over the classifier's size and training settings.

    python -m tuning.sweep --train FILES --eval FILES --directory DIR \\
        --tuner {random,hyperband,bayesian} [--max-trials N] \\
        [--objective val_accuracy|val_macro_f1|val_loss] [--space FILE|JSON] [--tpu [NAME|local]] [--export-best]
        [--task TASK | --multi-label] [--text-pair-column NAME] [--label-column NAME] ...

The task and the columns are pipeline.train's flags. A regression (--task
regression) ranks its trials by val_rmse, or by --objective val_pearson,
val_spearman or val_loss; a multi-label task (--multi-label) by
val_micro_f1, or val_macro_f1 or val_loss.

Trials keep their best epoch on, and are scored on, --eval: give it a
validation set, not the test split (train.validation_split and train.refit
are pipeline.train's, off in trials; train the best trial's settings with
pipeline.train, which holds out its slice and refits, and score that on the
test split). Started again with the same command, a sweep continues where it stopped:
completed trials are kept, an interrupted one resumes from its checkpoint.
For a distributed sweep, start one chief and any number of workers with the
same command and KERASTUNER_TUNER_ID (chief: "chief"), KERASTUNER_ORACLE_IP
and KERASTUNER_ORACLE_PORT set (see README).
"""

import argparse
import csv
import json
import os
import sys

import tensorflow as tf

from pipeline.config import override
from pipeline.export import export_saved_model, run_thresholds
from pipeline.files import create, open_text
from pipeline.layout import EXPORT_DIR, TRIALS_DIR
from pipeline.model_dir import restore_model
from pipeline.readers import DataError
from pipeline.strategy import TPUUnavailableError, configure_runtime, resolve_strategy, run_config
from pipeline.train import DATA_FLAGS, add_flags, data_paths, flag_overrides, prepare_data
from tuning.hypermodel import OBJECTIVES, ClassifierHyperModel, SweepTuner, Vocabularies, make_oracle, objectives
from tuning.search_space import SEARCH_SPACE, narrow

DEFAULT_OBJECTIVES = {"classification": "val_accuracy", "multi_label": "val_micro_f1", "regression": "val_rmse"}


def run_sweep(
    config,
    directory,
    train_paths,
    eval_paths,
    tuner_kind="random",
    max_trials=10,
    objective=None,
    space_overrides=None,
    tpu=None,
    export_best=False,
    strategy=None,
):
    """Runs (or continues) a sweep; returns the rows of the results table.

    `objective` ranks the trials (by default `DEFAULT_OBJECTIVES` of its
    `data.task`); `strategy` overrides the one `resolve_strategy(tpu)` picks."""
    task = config.data.task
    objective = objective or DEFAULT_OBJECTIVES[task]
    if objective not in objectives(task):
        raise ValueError(
            f"--objective {objective} is not a score of data.task {task}; its are {', '.join(objectives(task))}"
        )
    if config.train.members > 1:
        raise ValueError(
            f"train.members is {config.train.members}: sweeps compare single models; train the "
            "best trial's settings with pipeline.train --members"
        )
    # Trials are scored on --eval, the sweep's validation set: no slice of the
    # training files is held out and nothing is refit (pipeline.train does both
    # with the best trial's settings).
    config = override(config, {"train": {"validation_split": 0.0, "refit": False}}, "the sweep")
    strategy = strategy or resolve_strategy(tpu)
    configure_runtime(config, tpu)
    tuner_id = os.environ.get("KERASTUNER_TUNER_ID")
    # Each process of a distributed sweep reads the data once into its own folder.
    data_dir = os.path.join(directory, f"data_{tuner_id}") if tuner_id else directory
    train_paths, eval_paths = data_paths(train_paths, eval_paths, data_dir)
    max_length = config.model.max_length  # 0: derived from each trial's vocabulary
    prepared = prepare_data(config, data_dir, train_paths, eval_paths)
    config = prepared.config
    space = narrow(SEARCH_SPACE, space_overrides or {})
    data = Vocabularies(prepared, max_length, (train_paths, eval_paths))
    hypermodel = ClassifierHyperModel(config, space, data, strategy, tpu)
    tuner = SweepTuner(
        oracle=make_oracle(tuner_kind, objective, max_trials, config.train.seed, config.train.epochs),
        hypermodel=hypermodel,
        directory=directory,
        project_name=TRIALS_DIR,
        overwrite=False,
        distribution_strategy=strategy,
    )
    tuner.search()
    if tuner_id and tuner_id != "chief":
        return []  # workers run trials; the chief reports
    rows = results_table(tuner.oracle, objective, task)
    _write_results(rows, directory)
    print(format_results(rows))
    if export_best:
        best = tuner.oracle.get_best_trials(1)[0]
        trial_dir = tuner.get_trial_dir(best.trial_id)
        model, best_tokenizer, best_names = restore_model(trial_dir)
        thresholds = run_thresholds(trial_dir, model, best_names)
        path = export_saved_model(
            model, best_tokenizer, best_names, os.path.join(directory, EXPORT_DIR), thresholds=thresholds
        )
        print(f"Exported the best trial ({best.trial_id}, {objective} {best.score:.4f}) to {path}")
    return rows


def results_table(oracle, objective, task="classification"):
    rows = []
    for trial in sorted(oracle.trials.values(), key=lambda t: t.trial_id):
        metrics = {
            name: trial.metrics.get_best_value(name) if trial.metrics.exists(name) else None
            for name in objectives(task)
        }
        rows.append(
            {
                "trial": trial.trial_id,
                "status": trial.status,
                "score": trial.score,
                **metrics,
                **trial.hyperparameters.values,
            }
        )
    better = 1 if OBJECTIVES[objective][1] == "max" else -1  # best first, trials without a score last
    return sorted(rows, key=lambda r: (r["score"] is None, -better * (r["score"] or 0)))


def format_results(rows):
    if not rows:
        return "no trials"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    text = [
        [
            ("" if row.get(c) is None else f"{row[c]:.4g}" if isinstance(row.get(c), float) else str(row[c]))
            for c in columns
        ]
        for row in rows
    ]
    widths = [max(len(c), *(len(r[i]) for r in text)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in text]
    return "\n".join(lines)


def _write_results(rows, directory):
    with create(os.path.join(directory, "results.json")) as f:
        json.dump(rows, f, indent=2)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with create(os.path.join(directory, "results.csv")) as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)


def _space_overrides(value):
    if value is None:
        return {}
    text = open_text(value).read() if tf.io.gfile.exists(value) else value
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"--space {value}: neither a JSON file nor JSON text ({error})") from None


def parse_args(argv=None):
    """`(args, config overrides)` of the command line."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--train", help="training files, as pipeline.train (demo corpus if omitted)")
    parser.add_argument(
        "--eval",
        help="validation files that keep each trial's epoch and score it (required with --train; not the test split)",
    )
    parser.add_argument("--directory", required=True, help="sweep directory: trials, results, export")
    parser.add_argument("--tuner", choices=["random", "hyperband", "bayesian"], default="random")
    parser.add_argument("--max-trials", type=int, default=10, help="trials (random, bayesian)")
    parser.add_argument(
        "--objective",
        choices=sorted(OBJECTIVES),
        help="the trials' ranking score (default val_accuracy; a multi-label task's val_micro_f1, a regression's "
        "val_rmse)",
    )
    parser.add_argument("--config", help="JSON file of base config overrides, as pipeline.train")
    parser.add_argument("--epochs", type=int, help="epochs per trial (hyperband: the most per trial)")
    parser.add_argument(
        "--unlabelled",
        help="files of unlabelled text pre-trained on with the training texts, as pipeline.train "
        "(pretrain.unlabelled; trials whose pre-training would be the same share one)",
    )
    parser.add_argument(
        "--space",
        help="JSON file or text fixing/narrowing hyperparameters, e.g. "
        '\'{"num_layers": 4, "hidden_size": [128, 256]}\' (see tuning/search_space.py)',
    )
    parser.add_argument("--tpu", nargs="?", const="local", help="run trials on a TPU, as pipeline.train")
    parser.add_argument("--export-best", action="store_true", help="export the best trial to DIR/export")
    add_flags(parser, DATA_FLAGS)  # the task and the columns, as pipeline.train
    args = parser.parse_args(argv)
    overrides = flag_overrides(parser, args, DATA_FLAGS)
    if args.epochs:
        overrides["train"] = {"epochs": args.epochs}
    if args.unlabelled:
        overrides["pretrain"] = {"unlabelled": args.unlabelled}
    return args, overrides


def main(argv=None):
    args, overrides = parse_args(argv)
    try:
        strategy = resolve_strategy(args.tpu)
        config = run_config(args.config, overrides, strategy, args.tpu)
        run_sweep(
            config,
            args.directory,
            args.train,
            args.eval,
            args.tuner,
            args.max_trials,
            args.objective,
            _space_overrides(args.space),
            args.tpu,
            args.export_best,
            strategy,
        )
    except (DataError, TPUUnavailableError, ValueError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
