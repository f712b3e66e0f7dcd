"""Every default of the project, in one place, with a comment on each field.

`Config` groups four sections: `model` (what `build_model` builds), `data`
(how files become ids), `train` (how the model is optimized) and `pretrain`
(masked-language-model pre-training). A run's
resolved config is written to `MODEL_DIR/config.json`; `--config FILE`
overrides any field with a JSON file of the same nesting.
"""

import dataclasses
import json

from pipeline.files import create, open_text
from pipeline.labels import parse_class_weights
from pipeline.metrics import BEST_METRICS


@dataclasses.dataclass
class ModelConfig:
    # Token ids, from the learned vocabulary (set by the data pipeline).
    vocabulary_size: int = 0
    # Output classes, from the label set of the training data.
    num_classes: int = 0
    # Tokens per example, [CLS] included; fixed so TPU shapes are static.
    # 0 derives it from the training data: the 99th percentile of tokenized
    # lengths rounded up to a multiple of 16 (at most 512), since padding
    # costs as much compute as real tokens and most corpora are short.
    max_length: int = 0
    # E: width of the V x E embedding table (ALBERT-base: 128). Wider than
    # H it adds no rank (the E x H projection caps it at H), only weights
    # that train differently, and that helped: on 27k tweets
    # (bench/accuracy.py's split, 3 epochs, seeds 42 / 2 / 7) E 256 reached
    # validation accuracy 0.7612 / 0.7586 / 0.7612 and test accuracy
    # 0.7609 / 0.7590 / 0.7596, E 128 0.7586 / 0.7579 / 0.7553 and
    # 0.7588 / 0.7535 / 0.7551; E 512 was no better than 256.
    embedding_size: int = 256
    # H: width of the Transformer; E x H projects embeddings to it. Small
    # labelled corpora do not need more: on 27k tweets (bench/accuracy.py's
    # split, 3 epochs, seeds 42 / 2 / 7) H 128 with a 512-wide feed-forward
    # reached validation accuracy 0.7609 / 0.7579 / 0.7547 in about 210 s,
    # H 256 with 1024 0.7576 / 0.7553 / 0.7514 in about 600 s (both at E 128,
    # on the README's first, slower machine); 8 layers or 5 epochs at H 128
    # gained nothing. Larger corpora (and TPUs) want more.
    hidden_size: int = 128
    # N: Transformer layers applied; with sharing, depth adds no weights.
    num_layers: int = 4
    # Attention heads; hidden_size must divide evenly among them.
    num_heads: int = 4
    # Width of the position-wise feed-forward layer (4 x hidden, as BERT).
    intermediate_size: int = 512
    # Distinct blocks the N layers share: 1 = ALBERT, num_layers = no sharing.
    num_groups: int = 1
    # Activation of the feed-forward layer.
    hidden_activation: str = "gelu"
    # Dropout after each sub-layer and on the pooled vector; masked-LM
    # pre-training uses it too. Pre-training without it (ALBERT v2's choice)
    # on bench/accuracy.py's tweets, seeds 42 / 2 / 7: masked-token accuracy
    # and test accuracy rose (+0.31 / +0.14 / +0.63 points), validation
    # accuracy fell with every seed (-1.31 / -0.43 / -0.43): not kept.
    dropout_rate: float = 0.1
    # Dropout on attention weights. At 0 the CPU fast path attends in batched
    # matmuls with float32 logits and softmax under mixed_bfloat16; above 0
    # (and on TPUs) Keras's MultiHeadAttention attends, and drops weights.
    attention_dropout_rate: float = 0.0
    # Pre-norm blocks instead of the post-norm of BERT/ALBERT.
    norm_first: bool = False
    # Epsilon of every layer normalization (BERT/ALBERT use 1e-12).
    layer_norm_epsilon: float = 1e-12
    # Head pooling: "flatten" (source design), "mean" or "first" ([CLS]).
    pooling: str = "flatten"
    # Hold the flatten head's kernel as a kernel all positions share plus a
    # per-position one starting at zero: the same linear map, but it starts
    # as mean pooling and learns from every token (see ClassificationHead).
    head_shared_kernel: bool = True
    # Stddev of the truncated-normal initializers (BERT/ALBERT: 0.02).
    initializer_range: float = 0.02
    # Scale the embeddings to about unit variance, as tensor2tensor does, so
    # that the unit-amplitude timing signal added to them does not drown the
    # words (at ALBERT's 0.02 init they are ~0.005 against ~0.7). Measured:
    # without it, sentence-order prediction does not learn at all on a
    # task decided by the first token (see FactorizedEmbedding.unit_scale).
    embedding_unit_scale: bool = True


@dataclasses.dataclass
class DataConfig:
    # Column (CSV/TSV) or field (JSONL/TFRecord) holding the text.
    text_column: str = "text"
    # Column or field holding the label (string or integer).
    label_column: str = "label"
    # "auto" picks by file extension; or "csv", "tsv", "jsonl", "tfrecord".
    file_format: str = "auto"
    # Skip and count bad rows instead of stopping at the first one.
    skip_bad_rows: bool = False
    # "wordpiece" (tensorflow-text's learner) or "word" (source design).
    tokenizer: str = "wordpiece"
    # Vocabulary size: the word vocabulary's upper bound (reserved tokens
    # included); WordPiece's learner aims at it, and its alphabet of single
    # characters and ##-pieces can add a few hundred entries. Small labelled
    # corpora want a small one: more words share pieces that are seen often.
    # Validation accuracy on 27k tweets (bench/accuracy.py's split, 3 epochs,
    # seeds 42 / 2 / 7, at the H 256, E 128 of then): 16000 0.7445, 8000
    # 0.7507 / 0.7448 / 0.7540, 4000 0.7576 / 0.7550 / 0.7514, 2000 0.7478 -
    # a gain about the size of the noise. With today's defaults 8000 reached
    # 0.7527 / 0.7534 (seeds 42 / 2) against 4000's 0.7612 / 0.7586. Larger
    # corpora (and scripts with thousands of characters, such as Chinese)
    # want more.
    vocabulary_size: int = 4000
    # Words seen fewer times than this in training map to [UNK].
    min_count: int = 2
    # Case-fold text before splitting it.
    lower_case: bool = True
    # Unicode normalization applied before splitting ("NFKC", "NFD", "").
    normalization_form: str = "NFKC"


@dataclasses.dataclass
class TrainConfig:
    # Global batch size, split evenly across replicas. On 2 cores a step of
    # 64 costs 0.85x per sequence what two of 32 do, side by side
    # (bench/batch_size.py --task classification). On bench/accuracy.py's
    # tweets (the default run, seeds 42 / 2 / 7), 64 at 1e-3 against 32 at
    # 5e-4: test accuracy 0.7767 / 0.7737 / 0.7762 against 0.7758 / 0.7728 /
    # 0.7749 (+0.10 points on average, 95% interval -0.24 to +0.45),
    # validation accuracy 0.7684 / 0.7638 / 0.7661 against 0.7707 / 0.7727 /
    # 0.7678, the same epochs kept (bench/README.md).
    batch_size: int = 64
    # Passes over the training data.
    epochs: int = 3
    # Peak learning rate of AdamW, reached after warm-up. Validation accuracy
    # on 27k tweets after 3 epochs (bench/accuracy.py's split, at the H 256,
    # E 128 and single flatten kernel of then): 5e-4 0.7353, 1e-3 0.7298;
    # 2.5e-4 trailed both after 2 epochs (0.7032 against 0.7304 and 0.7255);
    # 2e-3 diverged in the first epoch, and 1e-3 without dropout in the
    # second. With today's defaults (seed 42) 1e-3 reached 0.7622 against
    # 0.7612, test accuracy 0.7569 against 0.7609: no difference. 5e-4 in
    # steps of 32; 1e-3 since they hold 64 (batch_size), as many steps fewer.
    learning_rate: float = 1e-3
    # Fraction of all steps spent warming up linearly from 0.
    warmup_fraction: float = 0.1
    # Decoupled weight decay of AdamW (not applied to norms and biases).
    weight_decay: float = 0.01
    # Gradients are clipped to this global norm.
    clip_norm: float = 1.0
    # Training batches (classification and masked-LM) group examples of
    # similar length and are cut to their longest one, rounded up to a
    # multiple of this: padding costs as much as real tokens, and most texts
    # are far shorter than max_length. The logits are the same either way
    # (padding is masked and zeroed). 0 keeps max_length; TPUs always do, as
    # they need static shapes. On bench/accuracy.py's tweets (max length 64)
    # 81% of the positions computed are real tokens with 16, 89% with 8 and
    # 94% with 4; classification steps took a median 131 / 117 / 117 ms
    # (bench/length_bucket.py, 10 A/B rounds on a 2-core Zen 3; 8 was faster
    # than 16 in 9 rounds); a whole default run there (one each, seed 42)
    # took 4% less time, masked-LM epochs 822 s against 864 and classification
    # epochs 355 s in both. 8 keeps lengths multiples of 8, as GPU matmul
    # units like them. Dropout masks hash each element's index, which the
    # cut length changes: another bucket trains as another dropout seed
    # would. Seeds 42 / 2 / 7 with 8 against 16: test accuracy -0.87 /
    # -0.46 / -0.14 points, validation +0.30 / +0.46 / -0.09 (README).
    length_bucket: int = 8
    # Weights of the classes in the classifier's loss: "none", "balanced"
    # (each class weighs examples / (classes x its examples), so a rare class
    # counts as much as a common one) or "NAME:WEIGHT,..." by class name.
    class_weight: str = "none"
    # Fraction of real tokens ([CLS] excepted) replaced by [UNK] in
    # classification training batches (not masked-LM's), a new draw every
    # epoch: word dropout, an augmentation against leaning on a few words.
    # 0 = off. Measured at 0.1 on the tweet corpus of bench/accuracy.py, same
    # seeds with and without (at the H 256, E 128 and vocabulary 8000 of
    # then): validation accuracy 0.7520 vs 0.7507 (seed 42) and 0.7547 vs
    # 0.7448 (seed 2), test accuracy 0.7491 vs 0.7517 (seed 42) - inside the
    # noise, so not on by default; a sweep can choose it.
    token_dropout: float = 0.0
    # Masked-LM epochs on the training texts (labels unused) before the
    # classifier trains, which then starts from their embeddings and encoder:
    # `pipeline.pretrain` then `--init-from`, in one run (the pre-trained run
    # is MODEL_DIR/pretrain); 0 trains from scratch. ALBERT is pre-trained,
    # then fine-tuned, and labelled sets are small. On bench/accuracy.py's
    # 30k tweets (seeds 42 / 2 / 7, masked-LM at 1e-3): 3 epochs gained 1.18,
    # 0.86 and 1.43 points of test accuracy over training from scratch, at
    # about 2x the time (262-273 s against 126-143 s on 2 cores); 6 raised
    # validation accuracy in all three seeds (0.7733 / 0.7678 / 0.7733
    # against 0.7678 / 0.7606 / 0.7665) and test accuracy by +0.59 / +0.26 /
    # -0.29 (0.7786 / 0.7708 / 0.7682; TF-IDF's 0.7745) in 383-392 s, with
    # masked-token accuracy 0.33 against 0.28. 10 did not raise validation
    # again (0.7743 / 0.7688 / 0.7691) at 40% more time; on the test split
    # it scored 0.7795 / 0.7716 / 0.7758. See bench/README.md. With
    # masked-LM at 5e-4, 5 epochs were no better than 3,
    # and 1 gained nothing over none. 7 since masked-LM steps hold 64
    # sequences (pretrain.batch_size): in the time 6 epochs of 32 took.
    pretrain_epochs: int = 7
    # Classifiers fine-tuned from the run's one pre-training (or, without
    # pre-training, on its one vocabulary), with seeds seed, seed + 1, ...,
    # and exported as one ensemble serving the mean of their probabilities;
    # members 2..N train in MODEL_DIR/members/<n>. Each costs a fine-tuning
    # (about 2 minutes on bench/accuracy.py's 27k tweets, 2 cores) and its
    # share of every request. On those tweets 3 members scored 0.7796 /
    # 0.7757 / 0.7787 (seeds 42 / 2 / 7), +0.10 / +0.48 / +1.05 points over
    # the single default run and above TF-IDF's 0.7745 with each seed, in
    # 654-707 s against 383-392 s; 2.2x the serving latency of one model,
    # which users choose to pay: one model is the default.
    members: int = 1
    # Decay of a moving average of the classifier's weights, updated every
    # step; every epoch is scored, kept, refit and exported with the
    # averages, while the weights train on as without. The decay starts low,
    # as tf.train.ExponentialMovingAverage's with num_updates does:
    # min(decay, (1 + step) / (10 + step)), so a fresh head's first weights
    # fade fast. Under about 9,000 steps that term decides: each step's
    # weights count as its number to the 8th power, the average's mean age
    # a tenth of the steps so far. 0 = off. On bench/accuracy.py's tweets
    # (the default run's three pre-trainings, seeds 42 / 2 / 7) validation
    # accuracy rose after 8 of the 9 epochs (after the first by +1.83 /
    # +1.57 / +0.20 points), the kept epochs' test accuracy by +0.29 / +0.29
    # / +0.05 and the refits' by +0.13 / -0.01 / +0.37 (mean +0.16, -0.10 to
    # +0.42), with the same epochs kept; the update costs about 1 ms of a
    # 70-80 ms step there (bench/weight_averaging.py, bench/README.md).
    weight_averaging: float = 0.999
    # Training steps run per host round trip, in one tf.while_loop (TPUs
    # want 50-1000). The weights are the same to the digit with any value;
    # each round trip (a progress update, two summaries, a sync and the next
    # call) cost 8-13 ms next to 70-90 ms steps on 2 cores, 1 -> 16 took
    # 0.73-0.87x the time per step (bench/host_loop.py, bench/README.md).
    steps_per_execution: int = 16
    # Save a resumable checkpoint every this many steps.
    checkpoint_every: int = 200
    # Train through the layers' CPU fast path (`layers/fast_path.py`):
    # hand-written gradients and small compiled passes that CPUs run faster.
    # Off, the layers are plain Keras composition, as under a TPU always.
    cpu_fast_path: bool = True
    # Compile each replica's training step with XLA, as a TPU compiles it:
    # `--tpu`'s step, checked on a CPU; slower there than the fast path.
    jit_compile: bool = False
    # Seed of initialization, shuffling and dropout.
    seed: int = 42
    # "auto" (mixed_bfloat16 on TPUs, float32 elsewhere), "float32" or
    # "mixed_bfloat16"; layer norms and the softmax stay float32 either way.
    precision: str = "auto"
    # Validation score that keeps the best epoch: "loss" (the lowest
    # cross-entropy), "accuracy" or "macro_f1" (the highest). The loss tells
    # epochs apart where accuracy cannot: on bench/accuracy.py's tweets
    # (3,053 held out; nine fine-tunings from three default pre-trainings,
    # Xeon, float32) the other epochs' held-out accuracies trailed the best
    # by 0-2.8 paired standard errors, their losses by 1.3-8.6. Accuracy
    # kept the first of the 3 epochs three times (by 11, 7 and 4 examples),
    # whose refits scored 0.7631 / 0.7681 / 0.7662 on the test split against
    # 0.7738 / 0.7771 / 0.7770 after the second; the loss kept the second
    # every time, each time the best refit of the three (mean 0.7755 against
    # accuracy's 0.7721 and TF-IDF's 0.7741; bench/README.md).
    best_metric: str = "loss"
    # Keep (save as best.weights.h5, export) the epoch with the best
    # validation score (see validation_split); false keeps the last epoch of
    # a run on all the training files, and the evaluation files are then
    # only reported on after every epoch, never choose anything.
    keep_best_epoch: bool = True
    # Fraction of the training examples held out (a stratified draw, the
    # same for every seed) to keep the best epoch on: the evaluation files
    # then choose nothing and are never trained on - they score the exported
    # model, the test split users report. The run pre-trains, learns its
    # vocabulary and fine-tunes on the rest, and with `refit` trains again on
    # all the training files. 0 keeps the best epoch on the evaluation files
    # instead (the defaults before: give a validation set as --eval then).
    # Unused without keep_best_epoch (nothing is chosen). On
    # bench/accuracy.py's tweets this with `refit` is the default the
    # benchmarks measure (README, Benchmarks).
    validation_split: float = 0.1
    # After the run keeps its best epoch, train the classifier again from the
    # same start (its pre-training, or the same seeded initialization) on the
    # training files and the examples the epoch was kept on (the held-out
    # slice; with validation_split 0, the evaluation files), with the
    # schedule of `epochs` over all of them, stopped after the epoch kept;
    # that refit is exported (MODEL_DIR/refit). So TF-IDF + logistic
    # regression is refit after choosing its C. It costs the fine-tuning
    # again, up to the kept epoch. On bench/accuracy.py's tweets (nine
    # fine-tunings from three default pre-trainings, the last 10% of the
    # training split held out) it scored 0.7742 on the test split against
    # 0.7711 without, +0.32 points (95% interval +0.05 to +0.56), level with
    # TF-IDF's 0.7745; trained to the last epoch instead of the kept one it
    # gained nothing (-0.04). It added 21-34% to a run's time there (at the
    # issue's reference speed 13.2-14.5 minutes against 10.2-11.1, inside
    # bench/accuracy.py's 15-minute budget). Unused without keep_best_epoch.
    refit: bool = True

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
        if self.best_metric not in BEST_METRICS:
            raise ValueError(f"train.best_metric must be one of {', '.join(BEST_METRICS)}, got {self.best_metric!r}")
        if self.class_weight not in ("none", "balanced"):
            parse_class_weights(self.class_weight)
        if not 0 <= self.validation_split < 1:
            raise ValueError(f"train.validation_split must be at least 0 and under 1, got {self.validation_split}")


@dataclasses.dataclass
class PretrainConfig:
    # Fraction of tokens chosen for prediction (BERT: 15%).
    mask_rate: float = 0.15
    # Of those, the fraction replaced by [MASK] (BERT: 80%) ...
    mask_token_rate: float = 0.8
    # ... and by a random token (BERT: 10%); the rest stay unchanged.
    random_token_rate: float = 0.1
    # Predicted positions per sequence, fixed so TPU shapes stay static
    # (BERT: 20 for 128 tokens); extra choices are not predicted.
    max_predictions: int = 20
    # Mask all pieces of a word together instead of single pieces. On
    # bench/accuracy.py's tweets (seeds 42 / 2 / 7) it lowered validation
    # accuracy with every seed (0.7684 / 0.7645 / 0.7720 against 0.7763 /
    # 0.7724 / 0.7724) and raised test accuracy (+0.48 / +0.29 / +0.30
    # points), as pre-training without dropout did: not kept.
    whole_word_masking: bool = False
    # ALBERT's sentence-order prediction as a second task: each document is
    # cut at a random word boundary into two segments, [CLS] A [SEP] B, and
    # half of them are swapped; a head on [CLS] predicts whether they were.
    sentence_order: bool = False
    # Peak learning rate of masked-LM training (warm-up, decay, weight decay
    # and clipping as train's); train.learning_rate is the classifier's.
    # Masked-LM took the classifier's 5e-4 before. On bench/accuracy.py's
    # tweets (3 masked-LM epochs on the 27k training texts, then the default
    # fine-tuning; seeds 42 / 2 / 7): 1e-3 reached masked-token accuracy
    # 0.280 / 0.282 / 0.279 against 0.241 at 5e-4, and test accuracy
    # 0.7727 / 0.7682 / 0.7711 against 0.7669 / 0.7628 / 0.7656 (+0.54 to
    # +0.58 points each); 2e-3 0.275-0.279 and 0.7741 / 0.7661 / 0.7697.
    # Validation accuracy could not tell 1e-3 from 2e-3 (means 0.7650 and
    # 0.7660). Fine-tuning in steps of 32 at 2.5e-4 or 1e-3 instead of 5e-4
    # lost 0.38 and 0.94 points, and a mask rate of 0.25 gained nothing
    # (seed 42). In steps of 64 (batch_size), 2e-3: see there.
    learning_rate: float = 2e-3
    # Sequences per masked-LM step (global; train.batch_size is the
    # classifier's, which masked-LM took before). On 2 cores a step of 64
    # costs 0.83-0.91x per sequence what two of 32 do (taller matmuls, and
    # each step's fixed costs - the optimizer's update of every weight, the
    # host loop's round trip - shared by twice as many; bench/batch_size.py),
    # so 7 epochs of 64 take the time 6 of 32 took. On bench/accuracy.py's
    # tweets (the default run, seeds 42 / 2 / 7), 7 epochs of 64 at 2e-3
    # against 6 of 32 at 1e-3: masked-token accuracy 0.361 / 0.345 / 0.343
    # against 0.337 / 0.339 / 0.332, exports 0.7758 / 0.7728 / 0.7749
    # against 0.7732 / 0.7695 / 0.7723 (+0.28 points on average, 95%
    # interval -0.06 to +0.63; TF-IDF 0.7741), the pre-training 442-480 s
    # against 444-480 s (bench/README.md).
    batch_size: int = 64

    def __post_init__(self):
        for name in ("batch_size", "max_predictions"):
            if getattr(self, name) < 1:  # refused when the config is read, before any work
                raise ValueError(f"pretrain.{name} must be 1 or more, got {getattr(self, name)}")


@dataclasses.dataclass
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    pretrain: PretrainConfig = dataclasses.field(default_factory=PretrainConfig)

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
