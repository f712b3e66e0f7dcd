"""Every default of the project, in one place, with why in a comment on each field.

`Config` groups five sections: `model` (what `build_model` builds), `data`
(how files become ids), `optimizer` (how a step updates the classifier's
weights), `train` (the run's plan: batches, epochs, what is kept, refit and
exported) and `pretrain` (masked-language-model pre-training). A run's
resolved config is written to `MODEL_DIR/config.json`; `--config FILE`
overrides any field with a JSON file of the same nesting. The measurements
behind the defaults are in bench/README.md and bench/LOG.md.
"""

import dataclasses
import json

from pipeline.files import create, open_text
from pipeline.labels import parse_class_weights
from pipeline.metrics import BEST_METRICS, TASKS


@dataclasses.dataclass
class ModelConfig:
    # Token ids, from the learned vocabulary (set by the data pipeline).
    vocabulary_size: int = 0
    # Output classes, from the label set of the training data (1 for a regression's score).
    num_classes: int = 0
    # The head's output, from data.task: "softmax" (one class), "sigmoid" (each label on or off) or "linear"
    # (a score).
    head_activation: str = "softmax"
    # A linear output's offset and scale, the training scores' mean and standard deviation (set by the data
    # pipeline): the head starts at their mean and learns standardized scores, whatever their unit.
    target_mean: float = 0.0
    target_scale: float = 1.0
    # A sigmoid head's offset of each label's logit, the log-odds of its share of the training texts (set by the
    # data pipeline): the head starts at the labels' base rates, where a start at 0.5 spends the first epochs
    # pushing every logit down through the encoder and leaves it predicting the base rates (bench/LOG.md).
    label_log_odds: list = dataclasses.field(default_factory=list)
    # Tokens per example, [CLS] included, fixed so that TPU shapes are static; 0 derives it from the
    # training data (99th percentile of tokenized lengths, rounded up to 16, at most 512).
    max_length: int = 0
    # E, the width of the V x E table: wider than H it adds weights that train differently, which helped
    # small corpora (bench/LOG.md).
    embedding_size: int = 256
    # H, the Transformer's width: small labelled corpora gain nothing from more; large ones and TPUs want more.
    hidden_size: int = 128
    # N, the layers applied; with sharing, depth adds no weights.
    num_layers: int = 4
    # Attention heads; hidden_size must divide evenly among them.
    num_heads: int = 4
    # Width of the position-wise feed-forward layer (4 x hidden, as BERT).
    intermediate_size: int = 512
    # Distinct blocks the N layers share: 1 is ALBERT, num_layers is no sharing.
    num_groups: int = 1
    # Activation of the feed-forward layer.
    hidden_activation: str = "gelu"
    # Dropout after each sub-layer and on the pooled vector, masked-LM pre-training included.
    dropout_rate: float = 0.1
    # Dropout on the attention weights; 0 lets the CPU fast path attend in batched matmuls.
    attention_dropout_rate: float = 0.0
    # Pre-norm blocks instead of the post-norm of BERT and ALBERT.
    norm_first: bool = False
    # Epsilon of every layer normalization (BERT and ALBERT use 1e-12).
    layer_norm_epsilon: float = 1e-12
    # Head pooling: "mean" over the real tokens, "flatten" (the source design's head: a weight per position,
    # which small corpora overfit; bench/README.md) or "first" ([CLS]).
    pooling: str = "mean"
    # The flatten head's kernel as one kernel all positions share plus a per-position one starting at zero:
    # the same linear map, but it learns from every token (ClassificationHead).
    head_shared_kernel: bool = True
    # Stddev of the truncated-normal initializers (BERT and ALBERT: 0.02).
    initializer_range: float = 0.02
    # Segments with a learned embedding each (segment 0 is [CLS] a [SEP], 1 is b [SEP]): 2 for pairs of texts
    # (set so by data.text_pair_column), 1 (none) for one text.
    segments: int = 1
    # Embeddings scaled to about unit variance, as tensor2tensor does, so that the timing signal added to
    # them does not drown the words (FactorizedEmbedding.unit_scale).
    embedding_unit_scale: bool = True


@dataclasses.dataclass
class DataConfig:
    # What the label column holds: "classification" (a class name or integer), "multi_label" (a list of labels,
    # any number of them a text) or "regression" (a number, predicted as a score).
    task: str = "classification"
    # What separates a multi_label row's labels in a text column (CSV, TSV; JSON Lines may give a list, and
    # TFRecord a feature of several values).
    label_delimiter: str = ";"
    # Column (CSV, TSV) or field (JSONL, TFRecord) holding the text.
    text_column: str = "text"
    # Column holding the second text of a pair (entailment, paraphrase, question and answer), packed as
    # [CLS] text [SEP] pair [SEP], cut longest first; "" for one text.
    text_pair_column: str = ""
    # Column or field holding the label (string or integer).
    label_column: str = "label"
    # "auto" picks by file extension; or "csv", "tsv", "jsonl", "tfrecord".
    file_format: str = "auto"
    # Skip and count bad rows instead of stopping at the first one.
    skip_bad_rows: bool = False
    # "wordpiece" (learned from the corpus) or "word" (the source design's).
    tokenizer: str = "wordpiece"
    # Entries the vocabulary aims at: small labelled corpora want a small one, so that words share pieces
    # seen often.
    vocabulary_size: int = 4000
    # Words seen fewer times than this in training map to [UNK].
    min_count: int = 2
    # Case-fold text before splitting it.
    lower_case: bool = True
    # Unicode normalization applied before splitting ("NFKC", "NFD", "").
    normalization_form: str = "NFKC"
    # Chinese text as words (those jieba finds in the training texts, cut by longest match) instead of one
    # token per character: "auto" (when Chinese characters are at least half of the training texts'
    # letters), "on" or "off". Measured in bench/README.md.
    chinese_words: str = "auto"
    # Texts pre-training learns the vocabulary and max_length from (which the classifier then takes): the first
    # this many of the files, read in an order drawn with train.seed (a draw of this many from texts in memory),
    # so that nothing waits for a large corpus to be read whole. A corpus of no more is read whole, in order.
    sample_size: int = 100_000

    @property
    def text_columns(self):
        """The text column, or with `text_pair_column` the pair of both, as the readers take them."""
        return (self.text_column, self.text_pair_column) if self.text_pair_column else self.text_column

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"data.task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if not self.label_delimiter:
            raise ValueError("data.label_delimiter must not be empty")
        if self.chinese_words not in ("auto", "on", "off"):
            raise ValueError(f"data.chinese_words must be auto, on or off, got {self.chinese_words!r}")
        if self.sample_size < 1:
            raise ValueError(f"data.sample_size must be 1 or more, got {self.sample_size}")


@dataclasses.dataclass
class OptimizerConfig:
    # Peak learning rate of the classifier's AdamW, reached after warm-up, then cosine decay.
    learning_rate: float = 1e-3
    # Fraction of all steps spent warming up linearly from 0.
    warmup_fraction: float = 0.1
    # Decoupled weight decay of AdamW, on the matrices only (not norms and biases), as BERT.
    weight_decay: float = 0.01
    # Gradients are clipped to this global norm.
    clip_norm: float = 1.0
    # Decay of a moving average of the classifier's weights, which every epoch is scored, kept, refit and
    # exported with (0 turns it off): it smooths the last steps' noise.
    weight_averaging: float = 0.999


@dataclasses.dataclass
class TrainConfig:
    # Global batch size, split evenly across replicas.
    batch_size: int = 64
    # Passes over the training data; 0 derives them from its size: enough for min_steps optimizer steps, at
    # least 3, so that a small corpus trains hundreds of steps rather than a few dozen.
    epochs: int = 0
    # The fewest optimizer steps derived epochs give the classifier.
    min_steps: int = 1000
    # Stop once this many epochs in a row have not bettered the kept epoch's validation score (0: never), so
    # that derived epochs end when the held-out score does.
    patience: int = 3
    # Batches group texts of similar length, cut to their longest rounded up to this multiple, since padding
    # costs as much as real tokens; 0 keeps max_length, as TPUs always do.
    length_bucket: int = 8
    # The classes' weights in the loss: "none", "balanced" (a rare class counts as much as a common one) or
    # "NAME:WEIGHT,..." by class name.
    class_weight: str = "none"
    # Fraction of real tokens replaced by [UNK] in classification batches, a new draw every epoch (word
    # dropout); 0 is off, a sweep can choose it.
    token_dropout: float = 0.0
    # Masked-LM epochs on the training texts before the classifier trains from their weights (0: from
    # scratch): labelled sets are small, and ALBERT is pre-trained, then fine-tuned.
    pretrain_epochs: int = 7
    # Classifiers fine-tuned from the run's one pre-training with seeds seed, seed + 1, ..., exported as
    # one ensemble; each adds its share of every request's cost, so one is the default.
    members: int = 1
    # Training steps per host round trip, in one tf.while_loop; the weights are the same with any value.
    steps_per_execution: int = 16
    # Save a resumable checkpoint every this many steps.
    checkpoint_every: int = 200
    # The layers' CPU fast path (layers/fast_path.py); off, they are plain Keras, as under a TPU always.
    cpu_fast_path: bool = True
    # Compile each replica's training step with XLA, as a TPU does: --tpu's step, checked on a CPU.
    jit_compile: bool = False
    # Seed of initialization, shuffling and dropout.
    seed: int = 42
    # "auto" (mixed_bfloat16 on TPUs, float32 elsewhere), "float32" or "mixed_bfloat16".
    precision: str = "auto"
    # The validation score that keeps the best epoch: "loss" (the lowest), or one of the task's scores in
    # pipeline.metrics.BEST_METRICS (accuracy, macro_f1; micro_f1; rmse, pearson, spearman); the loss tells
    # epochs apart where accuracy's resolution cannot.
    best_metric: str = "loss"
    # Keep and export the epoch with the best validation score; false keeps the last epoch, and the
    # evaluation files choose nothing.
    keep_best_epoch: bool = True
    # Fraction of the training examples held out (stratified, the same for every seed) to keep the best
    # epoch on, so that the evaluation files only score; 0 keeps it on the evaluation files.
    validation_split: float = 0.1
    # After keeping an epoch, train again from the same start on all the examples up to that epoch and
    # export that, as TF-IDF + logistic regression is refit after choosing its C.
    refit: bool = True
    # The refit's learning-rate schedule: "run" (the run's, planned for train.epochs, up to the kept epoch,
    # so the refit retraces the kept model's path) or "kept" (warm-up and decay planned anew for the kept
    # epochs, ending at 0), whose probabilities may drift from the thresholds a multi-label run chose.
    refit_schedule: str = "run"
    # A regression's loss: 0 is the squared error of standardized scores; above 0, the Huber loss with this
    # delta (in standard deviations of the training scores), linear beyond it, so outlying scores pull less.
    huber_delta: float = 0.0

    @property
    def holds_out(self):
        """Whether the run keeps its best epoch on a slice of the training
        files (`validation_split`) rather than on the evaluation files."""
        return self.keep_best_epoch and self.validation_split > 0

    @property
    def refits(self):
        """Whether the run trains again after keeping an epoch (`refit`)."""
        return self.keep_best_epoch and self.refit

    def __post_init__(self):
        if self.pretrain_epochs < 0:  # refused when the config is read, before any work
            raise ValueError(f"train.pretrain_epochs must be 0 (none) or more, got {self.pretrain_epochs}")
        if self.members < 1:
            raise ValueError(f"train.members must be 1 or more, got {self.members}")
        for name in ("epochs", "patience"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be 0 or more, got {getattr(self, name)}")
        if self.min_steps < 1:
            raise ValueError(f"train.min_steps must be 1 or more, got {self.min_steps}")
        if self.class_weight not in ("none", "balanced"):
            parse_class_weights(self.class_weight)
        if not 0 <= self.validation_split < 1:
            raise ValueError(f"train.validation_split must be at least 0 and under 1, got {self.validation_split}")
        if self.huber_delta < 0:
            raise ValueError(f"train.huber_delta must be 0 (squared error) or more, got {self.huber_delta}")
        if self.refit_schedule not in ("run", "kept"):
            raise ValueError(f"train.refit_schedule must be run or kept, got {self.refit_schedule!r}")


@dataclasses.dataclass
class PretrainConfig:
    # Fraction of tokens chosen for prediction (BERT: 15%).
    mask_rate: float = 0.15
    # Of those, the fraction replaced by [MASK] (BERT: 80%) ...
    mask_token_rate: float = 0.8
    # ... and by a random token (BERT: 10%); the rest stay unchanged.
    random_token_rate: float = 0.1
    # Predicted positions per sequence, fixed so that TPU shapes stay static (BERT: 20 for 128 tokens).
    max_predictions: int = 20
    # Mask all pieces of a word together instead of single pieces.
    whole_word_masking: bool = False
    # ALBERT's sentence-order prediction as a second task: documents cut into two segments, half swapped.
    sentence_order: bool = False
    # Peak learning rate of masked-LM training (optimizer.learning_rate is the classifier's); the rest of
    # its optimizer is `optimizer`'s, without the weight averaging.
    learning_rate: float = 2e-3
    # Sequences per masked-LM step (global; train.batch_size is the classifier's).
    batch_size: int = 64
    # Optimizer steps of masked-LM training; 0 runs train.epochs passes instead, which a corpus larger than
    # data.sample_size must first read whole to count.
    steps: int = 0
    # The fewest optimizer steps those passes give masked-LM training, so that a small corpus takes more
    # passes rather than a few dozen steps.
    min_steps: int = 1000
    # What a document is: "line" (each line or row, as classification texts are) or "blank_line" (plain text
    # whose documents end at a blank line, as BERT's and ALBERT's pre-training files are). A document's lines
    # are packed into sequences of up to max_length tokens; a longer line fills several.
    documents: str = "line"
    # Sequences a stream (a corpus larger than data.sample_size) is shuffled in; a smaller one is cached and
    # shuffled whole.
    shuffle_buffer: int = 10_000
    # Files of unlabelled text (a path, glob or comma-separated list; plain text, or any format the readers
    # take, its text column read and its labels ignored) pre-trained on besides the run's own texts: with
    # pipeline.train, its training texts, from which and these the vocabulary is learned too.
    unlabelled: str = ""
    # A tf.data service dispatcher ("grpc://HOST:PORT", started by python -m pipeline.data_service) whose
    # workers read, tokenize, pack and mask pipeline.pretrain's plain text files instead of this host's CPUs;
    # "" does it here. The workers take the files as they ask for them, so the steps' order is not repeatable.
    data_service: str = ""

    def __post_init__(self):
        for name in ("batch_size", "max_predictions", "shuffle_buffer"):
            if getattr(self, name) < 1:  # refused when the config is read, before any work
                raise ValueError(f"pretrain.{name} must be 1 or more, got {getattr(self, name)}")
        for name in ("steps", "min_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"pretrain.{name} must be 0 or more, got {getattr(self, name)}")
        if self.documents not in ("line", "blank_line"):
            raise ValueError(f"pretrain.documents must be line or blank_line, got {self.documents!r}")


@dataclasses.dataclass
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    pretrain: PretrainConfig = dataclasses.field(default_factory=PretrainConfig)

    def __post_init__(self):
        if self.data.text_pair_column and self.model.segments < 2:  # a pair's two segments
            self.model = dataclasses.replace(self.model, segments=2)
        # Checks across sections, refused when the config is read, before any work.
        metrics = BEST_METRICS[self.data.task]
        if self.train.best_metric not in metrics:
            raise ValueError(
                f"train.best_metric must be one of {', '.join(metrics)} for data.task {self.data.task}, "
                f"got {self.train.best_metric!r}"
            )
        if self.data.task != "regression" and self.train.huber_delta:
            raise ValueError(f"train.huber_delta is a regression's loss; data.task {self.data.task} has none")
        if self.data.task != "classification" and self.train.class_weight != "none":
            raise ValueError(
                f"train.class_weight {self.train.class_weight!r} weighs one class per text; data.task "
                f"{self.data.task} has none"
            )

    def to_dict(self):
        return dataclasses.asdict(self)

    def save(self, path):
        with create(path) as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values, source="config"):
        return override(cls(), values, source)

    @classmethod
    def load(cls, path, base=None):
        """Reads a JSON config over `base` (the defaults without it)."""
        with open_text(path) as f:
            try:
                values = json.load(f)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not valid JSON: {error}") from None
        return override(base or cls(), values, source=str(path))


def override(config, values, source="overrides"):
    """Returns a copy of `config` with the nested `values` replacing fields.

    Unknown sections or fields and values of the wrong type raise a
    `ValueError` naming `source` and the field, so a typo never passes
    silently.
    """
    if not isinstance(values, dict):
        raise ValueError(f"{source}: expected a JSON object, got {values!r}")
    changes = {}
    fields = {field.name: field for field in dataclasses.fields(config)}
    for key, value in values.items():
        if key not in fields:
            raise ValueError(f"{source}: unknown field {key!r} in {type(config).__name__}; known: {sorted(fields)}")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current):
            changes[key] = override(current, value, f"{source}: {key}")
        else:
            changes[key] = _coerce(value, type(current), f"{source}: {key}")
    return dataclasses.replace(config, **changes)


def _coerce(value, kind, where):
    # JSON has no int/float distinction worth failing on: 1 is a fine float.
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value
