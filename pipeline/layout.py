"""The names of the files and folders a run writes: the one place they are spelled.

A training run's directory (`pipeline.train`):

    config.json           resolved config (model sizes filled in)
    vocab.txt             vocabulary, one token per line
    tokenizer.json        tokenizer settings
    labels.json           class names, indexed by class id
    thresholds.json       of a multi_label run: each label's probability threshold, chosen
                          on its validation examples, which the export answers with
    checkpoints/          resumable state (model, optimizer, step)
    best.weights.h5       weights with the best validation score (the last epoch's
                          without train.keep_best_epoch)
    best_epoch.json       the epoch those weights are from, and its score (higher is better:
                          with train.best_metric "loss", the loss negated)
    epoch_losses.json     mean training loss of each finished epoch (kept across resumes)
    logs/                 TensorBoard
    metrics.json          final evaluation
    export/<version>/     serving SavedModel (with train.members, their ensemble)
    pretrain/             the run's masked-LM pre-training (train.pretrain_epochs), a
                          `pipeline.pretrain` run: config.json, vocab.txt, tokenizer.json,
                          checkpoints/, logs/, pretrain_metrics.json
    members/<n>/          members 2..N of train.members, each a run of this layout
    refit/                with train.refit, the classifier trained again on all the training
                          files: checkpoints/, logs/, epoch_losses.json, best.weights.h5
                          (its final weights, which the export serves)
    workers/<task>/       the other workers' files during a multi-worker run

A sweep's directory (`tuning.sweep`): KerasTuner's trials/trial_*/, each with
its own pretrain/ or a pretrained_from.json naming the trial's whose it shares,
and export/ for the best trial.
"""

CONFIG_FILE = "config.json"
VOCABULARY_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
THRESHOLDS_FILE = "thresholds.json"
CHECKPOINT_DIR = "checkpoints"
BEST_WEIGHTS = "best.weights.h5"
BEST_EPOCH = "best_epoch.json"
EPOCH_LOSSES = "epoch_losses.json"
LOGS_DIR = "logs"
METRICS_FILE = "metrics.json"
PRETRAIN_METRICS_FILE = "pretrain_metrics.json"
EXPORT_DIR = "export"
PRETRAIN_DIR = "pretrain"
MEMBERS_DIR = "members"
REFIT_DIR = "refit"
WORKERS_DIR = "workers"
PRETRAINED_FROM = "pretrained_from.json"
TRIALS_DIR = "trials"
