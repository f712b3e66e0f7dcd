"""The sweep's search space: every tunable field, its range and its config field.

Each entry maps a hyperparameter name to the config field it sets and its
default range. `narrow(space, overrides)` fixes or narrows any of them from
a dict (command line or JSON file):

    {"num_layers": 4}                              fix a value
    {"hidden_size": [128, 256]}                    choose among values
    {"learning_rate": {"min": 1e-4, "max": 1e-3}}  narrow a range
"""

import copy

from pipeline.config import ModelConfig

_DEFAULTS = ModelConfig()  # for the multiples when a space leaves out their base

# name: (config section, config field, spec). Choices keep hidden_size
# divisible by every num_heads choice (64 / 8 = 8 dims per head at least).
SEARCH_SPACE = {
    "embedding_size": ("model", "embedding_size", {"values": [64, 128, 256, 512]}),
    "hidden_size": ("model", "hidden_size", {"values": [128, 256, 384, 512]}),
    "num_heads": ("model", "num_heads", {"values": [2, 4, 8]}),
    "num_layers": ("model", "num_layers", {"min": 2, "max": 12, "step": 2}),
    # Feed-forward width as a multiple of hidden_size (BERT uses 4).
    "intermediate_multiple": ("model", "intermediate_size", {"values": [2, 4]}),
    "dropout_rate": ("model", "dropout_rate", {"min": 0.0, "max": 0.3, "step": 0.1}),
    # "all" = one block for every layer (ALBERT); "none" = num_groups = num_layers.
    "sharing": ("model", "num_groups", {"values": ["all", "none"]}),
    "pooling": ("model", "pooling", {"values": ["flatten", "mean", "first"]}),
    # Each size is learned and tokenized once per process, the first time a trial asks.
    "vocabulary_size": ("data", "vocabulary_size", {"values": [2000, 4000, 8000, 16000]}),
    "token_dropout": ("train", "token_dropout", {"values": [0.0, 0.1, 0.2]}),
    "learning_rate": ("optimizer", "learning_rate", {"min": 1e-4, "max": 3e-3, "sampling": "log"}),
    # The masked-LM rate of a trial's pre-training (none with train.pretrain_epochs 0).
    "pretrain_learning_rate": ("pretrain", "learning_rate", {"min": 3e-4, "max": 3e-3, "sampling": "log"}),
    "warmup_fraction": ("optimizer", "warmup_fraction", {"values": [0.0, 0.06, 0.1]}),
    "batch_size": ("train", "batch_size", {"values": [16, 32, 64]}),
}


def narrow(space, overrides, source="search space"):
    """A copy of `space` with `overrides` fixing or narrowing entries."""
    space = copy.deepcopy(space)
    for name, value in overrides.items():
        if name not in space:
            raise ValueError(f"{source}: unknown hyperparameter {name!r}; known: {sorted(space)}")
        section, field, spec = space[name]
        if isinstance(value, list):
            spec = {"values": value}
        elif isinstance(value, dict):
            unknown = set(value) - {"min", "max", "step", "sampling"}
            if unknown or "values" in spec:
                raise ValueError(f"{source}: {name} takes a value or a list, not {value!r}")
            if isinstance(spec["min"], float):  # a float range stays one: {"min": 0, ...}
                value = {k: float(v) if k != "sampling" else v for k, v in value.items()}
            spec = {**spec, **value}
        else:
            spec = {"fixed": value}
        space[name] = (section, field, spec)
    return space


def sample(hp, space, config=None):
    """Registers every entry of `space` on `hp`; returns config overrides.

    A choice defaults to `config`'s value where that is one of the choices
    (else to the first). KerasTuner builds its first model from the
    defaults, to learn the space, and fills in a value a trial lacks with
    them: with the base config's, that build reuses the run's vocabulary
    instead of learning another one.
    """
    values = {}
    for name, (section, field, spec) in space.items():
        if "fixed" in spec:
            values[name] = hp.Fixed(name, spec["fixed"])
        elif "values" in spec:
            current = getattr(getattr(config, section), field) if config else None
            values[name] = hp.Choice(name, spec["values"], default=current if current in spec["values"] else None)
        elif isinstance(spec["min"], int) and isinstance(spec["max"], int):
            values[name] = hp.Int(name, spec["min"], spec["max"], step=spec.get("step", 1))
        else:
            values[name] = hp.Float(
                name, spec["min"], spec["max"], step=spec.get("step"), sampling=spec.get("sampling", "linear")
            )
    overrides = {"model": {}, "data": {}, "optimizer": {}, "train": {}, "pretrain": {}}
    for name, value in values.items():
        section, field, _ = space[name]
        if name == "intermediate_multiple":
            value = value * values.get("hidden_size", _DEFAULTS.hidden_size)
        elif name == "sharing":
            value = 1 if value == "all" else values.get("num_layers", _DEFAULTS.num_layers)
        overrides[section][field] = value
    return overrides
