"""The KerasTuner side: a HyperModel over the project's config, and its tuner.

`ClassifierHyperModel.build(hp)` turns `hp` values into config overrides
and calls `build_model`; `fit` trains with the project's own loop
(`pipeline.train.fit_and_evaluate`: host loops, checkpoints, best epoch),
so a trial is trained exactly as `pipeline.train` trains, pre-training on
the training texts first with `train.pretrain_epochs` - or starting from an
earlier trial's finished pre-training where its own would repeat that one.
"""

import dataclasses
import json
import os

import keras_tuner
import tensorflow as tf

from pipeline.config import override
from pipeline.dataset import learn_tokenizer, load_split, read_split
from pipeline.files import atomic_write
from pipeline.layout import PRETRAIN_DIR, PRETRAINED_FROM
from pipeline.metrics import BEST_METRICS
from pipeline.model import build_model
from pipeline.model_dir import check_or_save_config, has_vocabulary, save_vocabulary
from pipeline.pretrain import finished_pretraining, initialize_from, vocabulary_texts
from pipeline.tokenizer import Tokenizer
from pipeline.train import fit_and_evaluate, pretrain_on_training_texts
from tuning.search_space import sample


def objectives(task):
    """The objectives of `data.task` `task`: each the kept epoch's validation
    score (`--objective val_loss` is `report["loss"]`), and its better direction."""
    return {f"val_{metric}": (metric, direction) for metric, direction in BEST_METRICS[task].items()}


# Every task's.
OBJECTIVES = {name: value for task in BEST_METRICS for name, value in objectives(task).items()}
# In a trial directory without pretrain/: the other trial's pre-training it started from.


class Vocabularies:
    """The sweep's two splits, tokenized once per vocabulary size.

    The base config's vocabulary is the run's own, from `prepare_data`. A
    trial asking for another `data.vocabulary_size` gets a tokenizer learned
    from the same training texts (and `pretrain.unlabelled`'s sample, as the
    run's) with the same settings (and the same
    `max_length`, or the same rule deriving it) the first time a trial of
    this process asks for that size; the texts are read once for all sizes.
    Learning is deterministic, so the processes of a distributed sweep and a
    resumed one agree on every size's ids.

    Args:
        prepared: the run's `PreparedData` (no held-out slice: the
            evaluation files are the sweep's validation set).
        max_length: the `model.max_length` asked for (0: derived per vocabulary).
        paths: `(train_paths, eval_paths)` of the run.

    Calling it with a `DataConfig` returns `(tokenizer, train, evaluation)`.
    """

    def __init__(self, prepared, max_length, paths):
        self.names, self.max_length, self.paths = prepared.names, max_length, paths
        self.config = prepared.config
        self._examples = self._texts = None
        self._by_size = {
            prepared.config.data.vocabulary_size: (prepared.tokenizer, prepared.train, prepared.evaluation)
        }

    def __call__(self, data_config):
        size = data_config.vocabulary_size
        if size not in self._by_size:
            if self._examples is None:
                self._examples = [read_split(paths, data_config) for paths in self.paths]
                self._texts = vocabulary_texts(self.config, self._examples[0])
            tokenizer = learn_tokenizer(self._texts, data_config, self.max_length, length_texts=self._examples[0].texts)
            self._by_size[size] = (
                tokenizer,
                *(load_split(examples, data_config, tokenizer, self.names) for examples in self._examples),
            )
        return self._by_size[size]


class ClassifierHyperModel(keras_tuner.HyperModel):
    """Builds and trains one trial of the classifier.

    Args:
        config: the base `Config` (vocabulary size and class count filled in).
        space: the search space (see `tuning.search_space`).
        data: the `Vocabularies` of the run.
        strategy: the distribution strategy trials train under.
        tpu: the sweep's `--tpu` (None without), for the precision policy
            a trial's pre-training sets (`pipeline.strategy.configure_runtime`).
    """

    def __init__(self, config, space, data, strategy, tpu=None, **kwargs):
        super().__init__(**kwargs)
        self.config, self.space, self.data, self.strategy, self.tpu = config, space, data, strategy, tpu

    def config_for(self, hp):
        """The trial's config, its model sized to its vocabulary."""
        config = override(self.config, sample(hp, self.space, self.config), "hyperparameters")
        tokenizer = self.data(config.data)[0]
        return dataclasses.replace(
            config,
            model=dataclasses.replace(
                config.model, vocabulary_size=len(tokenizer.vocabulary), max_length=tokenizer.max_length
            ),
        )

    def build(self, hp):
        return build_model(self.config_for(hp).model)

    def shared_pretraining(self, config, tokenizer, trial_dir):
        """A finished pre-training of another trial that this one's would
        repeat (the trials differ in their classifier's settings alone, or a
        Hyperband round trains a trial's values again), or None. A trial
        that began its own pre-training goes on with it."""
        if tf.io.gfile.exists(os.path.join(trial_dir, PRETRAIN_DIR)):
            return None
        others = sorted(tf.io.gfile.glob(os.path.join(os.path.dirname(trial_dir), "trial_*", PRETRAIN_DIR)))
        directory = finished_pretraining(config, tokenizer.vocabulary, others)
        if directory is not None:
            print(f"Starting from {directory}: this trial's pre-training would repeat it")
            with atomic_write(os.path.join(trial_dir, PRETRAINED_FROM)) as f:  # in place of its own pretrain/
                json.dump({"pretrain_dir": directory}, f)
        return directory

    def fit(self, hp, model, *args, trial_dir=None, epochs=None, **kwargs):
        # Keras callbacks in kwargs (KerasTuner's own checkpointing) are not
        # used: the project's loop checkpoints and keeps the best epoch.
        config = self.config_for(hp)
        tokenizer, train, evaluation = self.data(config.data)
        names = self.data.names
        tf.io.gfile.makedirs(trial_dir)
        # A trial directory is a model directory: pipeline.export reads it.
        check_or_save_config(trial_dir, config)
        if has_vocabulary(trial_dir) and Tokenizer.load(trial_dir).vocabulary != tokenizer.vocabulary:
            raise ValueError(
                f"{trial_dir}: its checkpoints use another vocabulary than the one "
                f"learned now for data.vocabulary_size {config.data.vocabulary_size}"
            )
        save_vocabulary(trial_dir, tokenizer, names)
        if config.train.pretrain_epochs:
            pretrain_dir = self.shared_pretraining(config, tokenizer, trial_dir)
            if pretrain_dir is None:  # as pipeline.train does, with the trial's own shapes and vocabulary
                pretrain_dir = pretrain_on_training_texts(
                    config, trial_dir, self.data.paths[0], trial_dir, self.tpu, self.strategy
                )
            initialize_from(model, pretrain_dir, config.model, tokenizer.vocabulary)
        report = fit_and_evaluate(model, config, self.strategy, train, evaluation, names, trial_dir, epochs=epochs)
        return {name: report[key] for name, (key, _) in objectives(config.data.task).items()}


def save_json(path, state):
    """Writes `state` as JSON to `path` through `atomic_write`.

    KerasTuner writes its tuner's, oracle's and trials' files in place: a
    sweep killed between opening one and closing it leaves that file empty
    or cut short, and the next run fails to reload the sweep. A rename
    leaves the previous file or the new one.
    """
    with atomic_write(path) as f:
        json.dump(state, f)


class _Resumable:
    """Oracle mixin for sweeps killed at any point: `oracle.json` and each
    `trial.json` written by `save_json`, and no trial left running by nobody.

    KerasTuner writes a new trial's file, then the oracle's. A sweep killed
    between the two leaves a trial whose file says RUNNING but which the
    oracle never handed out: reloaded, it would take a place among
    `max_trials` and never run. `reload` sends it for retry, as KerasTuner
    does with the trials the oracle's file says were running.
    """

    def save(self):
        save_json(self._get_oracle_fname(), self.get_state())

    def _save_trial(self, trial):
        save_json(os.path.join(self._get_trial_dir(trial.trial_id), "trial.json"), trial.get_state())

    def reload(self):
        super().reload()
        for trial_id in sorted(self.trials):
            if (
                self.trials[trial_id].status == keras_tuner.engine.trial.TrialStatus.RUNNING
                and trial_id not in self._retry_queue
            ):
                self._retry_queue.append(trial_id)


class RandomSearchOracle(_Resumable, keras_tuner.oracles.RandomSearchOracle):
    pass


class BayesianOptimizationOracle(_Resumable, keras_tuner.oracles.BayesianOptimizationOracle):
    pass


class HyperbandOracle(_Resumable, keras_tuner.oracles.HyperbandOracle):
    pass


class SweepTuner(keras_tuner.Tuner):
    """A tuner over any oracle that gives each trial its directory; its own
    file written by `save_json`, as the oracles above write theirs."""

    def save(self):
        if not self._is_worker():  # workers hold a client of the chief's oracle
            self.oracle.save()
        save_json(self._get_tuner_fname(), self.get_state())

    def run_trial(self, trial, *args, **kwargs):
        hp = trial.hyperparameters
        model = self._try_build(hp)  # under the distribution strategy's scope
        return self.hypermodel.fit(
            hp,
            model,
            *args,
            trial_dir=self.get_trial_dir(trial.trial_id),
            epochs=hp.values.get("tuner/epochs"),
            **kwargs,
        )


def make_oracle(kind, objective, max_trials, seed, max_epochs):
    """The KerasTuner oracle for `--tuner`."""
    objective = keras_tuner.Objective(objective, direction=OBJECTIVES[objective][1])
    if kind == "random":
        return RandomSearchOracle(objective, max_trials=max_trials, seed=seed)
    if kind == "bayesian":
        try:
            import scipy  # noqa: F401
            import sklearn  # noqa: F401
        except ImportError as error:
            raise ValueError(f"--tuner bayesian needs the bayesian extra (pip install -e '.[bayesian]'): {error}")
        return BayesianOptimizationOracle(objective, max_trials=max_trials, seed=seed)
    if kind == "hyperband":
        return HyperbandOracle(objective, max_epochs=max_epochs, seed=seed, hyperband_iterations=1)
    raise ValueError(f"--tuner must be random, hyperband or bayesian, got {kind!r}")
