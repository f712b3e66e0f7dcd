"""A distributed training loop: host loops, checkpoints, resume, NaN stops.

Keras >= 3.7 fails `fit` with `steps_per_execution > 1` under a multi-replica
`MirroredStrategy` ("You must feed a value for placeholder tensor
'while/cond/Placeholder'"), and TPUs need exactly that host loop. So the loop
is written out: `strategy.run` of one step inside a `tf.while_loop` inside a
`tf.function`, as TPU code in the TF Model Garden does, with the model,
optimizer and metrics still Keras objects. The functions here are traced
without autograph: nothing in them or in the layers branches on tensors,
and converting every layer's `call` took about 2 s of each process's start
on 2 cores (a tiny run with its refit: 16.1 -> 14.0 s, means of 4
alternated pairs, each pair faster by 1.5-3.0 s).
"""

import json
import math
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pipeline.dataset import distribute, eval_dataset
from pipeline.files import atomic_write, open_text
from pipeline.layout import BEST_EPOCH, BEST_WEIGHTS, CHECKPOINT_DIR, EPOCH_LOSSES, LOGS_DIR
from pipeline.strategy import output_dir


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss); the message says what is kept."""


def model_variables(model):
    """Every variable of `model` for `tf.train.Checkpoint`, keyed by position.

    A Keras 3 model given to `tf.train.Checkpoint` contributes no variables
    (its weights would be saved only through the optimizer's references,
    and a model-only restore would silently restore nothing), so they are
    listed explicitly, dropout seed states included. Keyed by position, not
    path: Keras numbers seed generators process-wide, while positions are
    fixed by the architecture.
    """
    return {f"variable_{index}": variable for index, variable in enumerate(model.variables)}


def build_optimizer(optimizer_config, total_steps):
    """AdamW with linear warm-up to the peak rate, then cosine decay."""
    warmup_steps = int(total_steps * optimizer_config.warmup_fraction)
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(total_steps - warmup_steps, 1),
        warmup_target=optimizer_config.learning_rate,
        warmup_steps=warmup_steps,
    )
    optimizer = _SummedGradientsAdamW(
        learning_rate=schedule, weight_decay=optimizer_config.weight_decay, epsilon=1e-6, name="adamw"
    )
    # Decay the matrices only, as BERT does: not biases nor normalization scales.
    optimizer.exclude_from_weight_decay(var_names=["bias", "norm"])
    return optimizer


class _SummedGradientsAdamW(keras.optimizers.AdamW):
    """AdamW given gradients the trainer has already summed over replicas.

    The trainer sums them itself, once, to clip their global norm (Keras
    clips each replica's before summing); Keras's TensorFlow optimizers sum
    replicas again in `_all_reduce_sum_gradients`, which this skips.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        # As Keras's, with one cache of the step's scalars for all variables.
        scalars = {}

        def apply(variable, gradient, learning_rate):
            return self._apply_adam(gradient, variable, learning_rate, scalars)

        for gradient, variable in grads_and_vars:
            distribution.extended.update(variable, apply, args=(gradient, learning_rate), group=False)

    def update_step(self, gradient, variable, learning_rate):
        self._apply_adam(gradient, variable, learning_rate, {})

    def _apply_adam(self, gradient, variable, learning_rate, scalars):
        # Adam's update as one kernel (ResourceApplyAdam, which XLA compiles
        # too), the same arithmetic as Keras's dozen ops a variable, which
        # took longer to trace than the model's forward pass. Its scalars
        # (bias corrections, rates) are made once a step per dtype and
        # device, in `scalars`: made per variable they were a fifth of the
        # training step's graph.
        dtype = variable.dtype
        key = (dtype, variable.device)
        if key not in scalars:
            local_step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            scalars[key] = {
                "beta1_power": tf.pow(beta_1, local_step),
                "beta2_power": tf.pow(beta_2, local_step),
                "lr": tf.cast(learning_rate, dtype),
                "beta1": beta_1,
                "beta2": beta_2,
                "epsilon": tf.cast(self.epsilon, dtype),
            }
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            grad=tf.cast(gradient, dtype),
            **scalars[key],
        )

    def _apply_weight_decay(self, variables):
        # As Keras's, but the schedule is read once a step, not once per
        # decayed variable: each read traces the schedule's graph again.
        def apply(distribution, variables):
            learning_rate = self.learning_rate
            for variable in (variable.value for variable in variables):  # tf.Variables, named by path
                if self._use_weight_decay(variable):
                    distribution.extended.update(
                        variable,
                        lambda value: value.assign_sub(
                            value * tf.cast(self.weight_decay, value.dtype) * tf.cast(learning_rate, value.dtype)
                        ),
                        group=False,
                    )

        tf.__internal__.distribute.interim.maybe_merge_call(apply, self._distribution_strategy, variables)


def _per_example_loss(labels, probabilities, weights=None):
    # Cross-entropy per example; weighted, and averaged over an example's
    # real predictions where there are several (masked-LM slots).
    loss = keras.losses.sparse_categorical_crossentropy(labels, probabilities)
    if weights is None:
        return loss
    if loss.shape.rank == 1:
        return loss * weights
    return tf.reduce_sum(loss * weights, axis=-1) / tf.maximum(tf.reduce_sum(weights, axis=-1), 1.0)


class Predictor:
    """The probabilities of a model (built in `strategy.scope()`) on a split.

    Called with a split, returns `(probabilities, labels)` of every example,
    each once. Every host of a multi-host run scores its own shard; the
    results are gathered from all replicas of all hosts, so each host returns
    all of them (in replica order, with their labels: the same order for
    every model under the same strategy and batch size).
    """

    def __init__(self, model, strategy, batch_size):
        self.model, self.strategy, self.batch_size = model, strategy, batch_size

    @tf.function(autograph=False)
    def _predict_step(self, ids, labels, weights):
        probabilities = self.strategy.run(lambda x: self.model(x, training=False), args=(ids,))
        outputs = (probabilities, labels, weights)
        if len(self.strategy.experimental_local_results(ids)) < self.strategy.num_replicas_in_sync:
            # Other hosts hold replicas too: gather every replica's rows.
            return tuple(self.strategy.gather(value, axis=0) for value in outputs)
        return outputs

    def __call__(self, split):
        dataset = distribute(self.strategy, eval_dataset, split, self.batch_size)
        local = self.strategy.experimental_local_results
        probabilities, labels, weights = [], [], []
        for batch in dataset:
            for values, output in zip((probabilities, labels, weights), self._predict_step(*batch)):
                values.extend(value.numpy() for value in local(output))
        real = np.concatenate(weights) > 0  # padding rows have weight 0
        return np.concatenate(probabilities)[real], np.concatenate(labels)[real]


class Trainer:
    """Trains a `build_model` classifier under a strategy; create it in `strategy.scope()`.

    Resumes from the checkpoints in `model_dir`; writes checkpoints, the best
    weights and TensorBoard logs to `output_dir` (`model_dir` except on the
    non-chief workers of a cluster; see `pipeline.strategy.output_dir`).
    `optimizer_config` is the `OptimizerConfig` `optimizer` was built from
    (its clipping and weight averaging act here); `learning_rate_field` names
    the config field its learning rate came from, for the message of a loss
    that stops being finite.
    `class_weights` (float `(classes,)`, `pipeline.labels.class_weights`)
    weigh each classification example's loss by its label. With `task`
    "multi_label" (`data.task`), the model's outputs are each label's
    probability and its loss their binary cross-entropy; with "regression",
    its output is a score and its loss the squared error of scores
    standardized by `target_scale` (their Huber loss with
    `train_config.huber_delta`).
    """

    def __init__(
        self,
        model,
        optimizer,
        strategy,
        train_config,
        optimizer_config,
        model_dir,
        learning_rate_field="optimizer.learning_rate",
        class_weights=None,
        task="classification",
        target_scale=1.0,
    ):
        self.model, self.optimizer, self.strategy = model, optimizer, strategy
        self.task, self.target_scale = task, target_scale
        self.class_weights = None if class_weights is None else tf.constant(class_weights, tf.float32)
        self.config, self.optimizer_config = train_config, optimizer_config
        self.learning_rate_field = learning_rate_field
        self.model_dir = model_dir
        self.output_dir = output_dir(model_dir, strategy)
        self.loss = keras.metrics.Mean(name="loss")
        # What the progress line shows beside the loss.
        self.metric = {
            "regression": lambda: keras.metrics.RootMeanSquaredError(name="rmse"),
            "multi_label": lambda: keras.metrics.BinaryAccuracy(name="label_accuracy"),
        }.get(task, lambda: keras.metrics.SparseCategoricalAccuracy(name="accuracy"))()
        self.predictor = Predictor(model, strategy, train_config.batch_size)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.best_score = tf.Variable(-math.inf, dtype=tf.float64, trainable=False, name="best_score")
        self.optimizer.build(model.trainable_variables)  # so a restore fills its slots
        self._replica_step, self._gradients = self._train_step, self._forward_backward
        if train_config.jit_compile:
            # One XLA program per replica step, as a TPU compiles it. With
            # several replicas off TPUs, the cross-replica sum runs between
            # devices, outside any one device's program: the forward and
            # backward passes are compiled, the update after the sum is not.
            if strategy.num_replicas_in_sync == 1:
                self._replica_step = tf.function(self._train_step, jit_compile=True, autograph=False)
            else:
                self._gradients = tf.function(self._forward_backward, jit_compile=True, autograph=False)
        self._restored = False
        # The moving averages of the trainable weights (optimizer.weight_averaging),
        # what every epoch is scored and kept with.
        self.averages = (
            [
                tf.Variable(variable.value, trainable=False, name=f"average_{index}")
                for index, variable in enumerate(model.trainable_variables)
            ]
            if optimizer_config.weight_averaging
            else []
        )
        checkpoint = tf.train.Checkpoint(
            model=model_variables(model),
            optimizer=optimizer,
            step=self.step,
            best_score=self.best_score,
            averages={f"average_{index}": average for index, average in enumerate(self.averages)},
        )
        self.manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(self.output_dir, CHECKPOINT_DIR), max_to_keep=2
        )

    def restore(self):
        """Restores the latest checkpoint of `model_dir`, if any; returns the step reached."""
        self._restored = True
        latest = tf.train.latest_checkpoint(os.path.join(self.model_dir, CHECKPOINT_DIR))
        if latest:
            self.manager.checkpoint.restore(latest).assert_existing_objects_matched()
        return int(self.step.numpy())

    @tf.function(autograph=False)
    def _train_steps(self, iterator, steps):
        # The host loop: `steps` training steps per call, one round trip.
        def body(step):
            self.strategy.run(self._replica_step, args=(next(iterator),))
            return (step + 1,)

        tf.while_loop(lambda step: step < steps, body, (tf.constant(0, steps.dtype),))

    def _train_step(self, batch):
        per_example, gradients, (probabilities, labels, weights) = self._gradients(batch)
        context = tf.distribute.get_replica_context()
        if context.num_replicas_in_sync > 1:
            # An embedding's gradient is IndexedSlices, a row per token
            # position; their all-reduce gathers the rows, and a collective
            # gather keeps the shape of its first call, so length-bucketed
            # steps of another length fail ("Shape mismatch in the collective
            # instance"). Dense, the gradient has the table's shape every step.
            gradients = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients]
            # The one sum over replicas: the optimizer does not sum again.
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        # Clipped by the global norm of the summed gradient, as on one device.
        gradients, _ = tf.clip_by_global_norm(gradients, self.optimizer_config.clip_norm)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        if self.averages:
            context.merge_call(self._update_averages)
        self.loss.update_state(per_example)
        self.metric.update_state(labels, probabilities, sample_weight=weights)

    def _forward_backward(self, batch):
        # Classification: (ids, labels). Masked-LM: (features, ids, weights)
        # with labels and weights (batch, predictions); weight 0 pads. With
        # several outputs (masked-LM + sentence order), dicts of those by
        # output name; the losses add up, the accuracy is the first output's.
        # Returns the per-example losses, this replica's gradients, and what
        # the accuracy is measured on.
        features, labels, *weights = batch
        weights = weights[0] if weights else None
        with tf.GradientTape() as tape:
            probabilities = self.model(features, training=True)
            if isinstance(probabilities, dict):
                per_example = tf.add_n(
                    [_per_example_loss(labels[name], probabilities[name], weights[name]) for name in probabilities]
                )
                name = next(iter(probabilities))
                probabilities, labels, weights = probabilities[name], labels[name], weights[name]
            elif self.task == "regression":
                errors = (probabilities[:, 0] - labels) / self.target_scale
                per_example = tf.square(errors)
                if self.config.huber_delta:  # as keras.losses.Huber
                    delta = self.config.huber_delta
                    per_example = tf.where(
                        tf.abs(errors) <= delta, 0.5 * per_example, delta * (tf.abs(errors) - 0.5 * delta)
                    )
            elif self.task == "multi_label":  # the mean over the labels
                per_example = keras.losses.binary_crossentropy(labels, probabilities)
            else:
                per_example = _per_example_loss(labels, probabilities, weights)
                if self.class_weights is not None:
                    per_example *= tf.gather(self.class_weights, labels)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.config.batch_size)
        gradients = tape.gradient(loss, self.model.trainable_variables)
        return per_example, gradients, (probabilities, labels, weights)

    def _update_averages(self, strategy):
        # As tf.train.ExponentialMovingAverage with num_updates: the decay
        # starts low, so the first steps' weights (a head just initialized)
        # fade from the averages quickly.
        updates = tf.cast(self.optimizer.iterations, tf.float32)
        decay = tf.minimum(self.optimizer_config.weight_averaging, (1.0 + updates) / (10.0 + updates))

        def update(average, variable):
            return average.assign(decay * average + (1.0 - decay) * variable)

        for average, variable in zip(self.averages, self.model.trainable_variables):
            strategy.extended.update(average, update, args=(variable.value,), group=False)

    def _swap_averages(self):
        # The model's trainable weights and their averages trade places.
        for average, variable in zip(self.averages, self.model.trainable_variables):
            weights = tf.identity(variable.value)
            variable.assign(average)
            average.assign(weights)

    def predict(self, split):
        """`(probabilities, labels)` of every example of `split`; see `Predictor`."""
        return self.predictor(split)

    def fit(self, make_dataset, num_examples, epochs, on_epoch_end=None):
        """Trains to `epochs` from wherever the last checkpoint left off.

        `make_dataset(epoch=, skip_batches=, input_context=)` returns one
        epoch of global-batch-size batches (e.g. `dataset.train_dataset` with
        its split, batch size and seed bound). `on_epoch_end(epoch)` returns
        the validation score, higher the better; the weights with the best
        score so far (the latest ones without `keep_best_epoch`) are saved to
        `best.weights.h5` in `output_dir` and their epoch (counted from 1)
        and score to `best_epoch.json`. With `weight_averaging`, the model
        holds the moving averages of its weights while it is scored and
        saved, and once training ends; it trains on its own. With
        `train.patience`, training stops once that many epochs in a row have
        not bettered the kept one's score (a run started again after that
        stop trains no more). Returns the mean training loss of every epoch,
        by epoch number: those finished before a resume are read back from
        `epoch_losses.json` (a run found finished returns them all); an epoch
        resumed in its middle averages the steps after the resume.
        """
        steps_per_epoch = num_examples // self.config.batch_size
        if steps_per_epoch == 0:
            raise ValueError(f"{num_examples} training examples make no batch of {self.config.batch_size}")
        total_steps = steps_per_epoch * epochs
        step = int(self.step.numpy()) if self._restored else self.restore()
        if step:
            print(f"Resuming from the checkpoint at step {step} of {total_steps}.")
        writer = tf.summary.create_file_writer(os.path.join(self.output_dir, LOGS_DIR, "train"))
        epoch_losses = self._finished_epoch_losses(step // steps_per_epoch)
        patience = self.config.patience if on_epoch_end and self.config.keep_best_epoch else 0
        best_epoch = self._kept_epoch() if patience else 0
        if patience and step % steps_per_epoch == 0 and step // steps_per_epoch - best_epoch >= patience:
            step = total_steps  # stopped early before the restart: nothing more to train
        while step < total_steps:
            epoch, offset = divmod(step, steps_per_epoch)
            print(f"Epoch {epoch + 1}/{epochs}")
            dataset = distribute(self.strategy, make_dataset, epoch=epoch, skip_batches=offset)
            iterator = iter(dataset)
            progress = keras.utils.Progbar(  # one line per epoch when not on a terminal
                steps_per_epoch, verbose=1 if sys.stdout.isatty() else 2, stateful_metrics=["loss", self.metric.name]
            )
            self.loss.reset_state()
            self.metric.reset_state()
            while offset < steps_per_epoch:
                steps = min(
                    self.config.steps_per_execution,
                    steps_per_epoch - offset,
                    self.config.checkpoint_every - step % self.config.checkpoint_every,
                )
                self._train_steps(iterator, tf.constant(steps))
                offset, step = offset + steps, step + steps
                self._check_finite(step)
                self.step.assign(step)
                values = [("loss", float(self.loss.result())), (self.metric.name, float(self.metric.result()))]
                progress.update(offset, values)
                with writer.as_default(step=step):
                    for name, value in values:
                        tf.summary.scalar(name, value)
                if step % self.config.checkpoint_every == 0 and offset < steps_per_epoch:
                    # An epoch's last step is saved after its evaluation: a
                    # checkpoint at the end of an epoch means it was scored.
                    self.manager.save(checkpoint_number=step)
            epoch_losses[epoch + 1] = float(self.loss.result())
            with atomic_write(os.path.join(self.output_dir, EPOCH_LOSSES)) as f:
                json.dump(epoch_losses, f)
            self._swap_averages()  # scored and kept: the averages
            score = on_epoch_end(epoch) if on_epoch_end else None
            if score is not None and (score > self.best_score.numpy() or not self.config.keep_best_epoch):
                self.best_score.assign(score)
                self.model.save_weights(os.path.join(self.output_dir, BEST_WEIGHTS))
                with atomic_write(os.path.join(self.output_dir, BEST_EPOCH)) as f:
                    json.dump({"epoch": epoch + 1, "score": float(score)}, f)
                best_epoch = epoch + 1
            self._swap_averages()
            self.manager.save(checkpoint_number=step)
            if patience and epoch + 1 - best_epoch >= patience and step < total_steps:
                print(f"No better validation score in {patience} epochs: stopped after epoch {epoch + 1} of {epochs}")
                break
        self._swap_averages()  # the model ends holding what it would keep
        return epoch_losses

    def _kept_epoch(self):
        # The epoch best.weights.h5 holds, 0 before any was kept.
        path = os.path.join(self.output_dir, BEST_EPOCH)
        if not tf.io.gfile.exists(path):
            return 0
        with open_text(path) as f:
            return json.load(f)["epoch"]

    def _finished_epoch_losses(self, finished):
        # What earlier processes recorded for the epochs the checkpoint has finished.
        path = os.path.join(self.model_dir, EPOCH_LOSSES)
        if not finished or not tf.io.gfile.exists(path):
            return {}
        with open_text(path) as f:
            return {int(epoch): loss for epoch, loss in json.load(f).items() if int(epoch) <= finished}

    def _check_finite(self, step):
        loss = float(self.loss.result())
        if not math.isfinite(loss):
            kept = self.manager.latest_checkpoint or "none was saved yet"
            raise TrainingError(
                f"training loss became {loss} by step {step}; stopped without saving. "
                f"The last good checkpoint is kept: {kept}. Lower {self.learning_rate_field} "
                f"(now {self.optimizer_config.learning_rate}) "
                f"or optimizer.clip_norm (now {self.optimizer_config.clip_norm})."
            )
