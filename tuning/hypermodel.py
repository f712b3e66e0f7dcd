"""The KerasTuner side: a HyperModel over the project's config, and its tuner.

`ClassifierHyperModel.build(hp)` turns `hp` values into config overrides
and calls `build_model`; `fit` trains with the project's own loop
(`pipeline.train.fit_and_evaluate`: host loops, checkpoints, best epoch),
so a trial is trained exactly as `pipeline.train` trains.
"""

import os

import keras_tuner

from pipeline.config import override
from pipeline.model import build_model
from pipeline.model_dir import check_or_save_config, save_vocabulary
from pipeline.train import fit_and_evaluate
from tuning.search_space import sample

OBJECTIVES = {"val_accuracy": "accuracy", "val_macro_f1": "macro_f1"}


class ClassifierHyperModel(keras_tuner.HyperModel):
    """Builds and trains one trial of the classifier.

    Args:
        config: the base `Config` (vocabulary size and class count filled in).
        space: the search space (see `tuning.search_space`).
        data: `(train_split, eval_split, label_names, tokenizer)`, read once.
        strategy: the distribution strategy trials train under.
    """

    def __init__(self, config, space, data, strategy, **kwargs):
        super().__init__(**kwargs)
        self.config, self.space, self.data, self.strategy = config, space, data, strategy

    def config_for(self, hp):
        return override(self.config, sample(hp, self.space), "hyperparameters")

    def build(self, hp):
        return build_model(self.config_for(hp).model)

    def fit(self, hp, model, *args, trial_dir=None, epochs=None, **kwargs):
        # Keras callbacks in kwargs (KerasTuner's own checkpointing) are not
        # used: the project's loop checkpoints and keeps the best epoch.
        config = self.config_for(hp)
        train, evaluation, names, tokenizer = self.data
        os.makedirs(trial_dir, exist_ok=True)
        # A trial directory is a model directory: pipeline.export reads it.
        check_or_save_config(trial_dir, config)
        save_vocabulary(trial_dir, tokenizer, names)
        report = fit_and_evaluate(model, config, self.strategy, train, evaluation, names,
                                  trial_dir, epochs=epochs)
        return {name: report[key] for name, key in OBJECTIVES.items()}


class SweepTuner(keras_tuner.Tuner):
    """A tuner over any oracle that gives each trial its directory."""

    def run_trial(self, trial, *args, **kwargs):
        hp = trial.hyperparameters
        model = self._try_build(hp)  # under the distribution strategy's scope
        return self.hypermodel.fit(hp, model, *args, trial_dir=self.get_trial_dir(trial.trial_id),
                                   epochs=hp.values.get("tuner/epochs"), **kwargs)


def make_oracle(kind, objective, max_trials, seed, max_epochs):
    """The KerasTuner oracle for `--tuner`."""
    objective = keras_tuner.Objective(objective, direction="max")
    if kind == "random":
        return keras_tuner.oracles.RandomSearchOracle(objective, max_trials=max_trials, seed=seed)
    if kind == "bayesian":
        return keras_tuner.oracles.BayesianOptimizationOracle(objective, max_trials=max_trials, seed=seed)
    if kind == "hyperband":
        return keras_tuner.oracles.HyperbandOracle(objective, max_epochs=max_epochs, seed=seed,
                                                   hyperband_iterations=1)
    raise ValueError(f"--tuner must be random, hyperband or bayesian, got {kind!r}")
