"""A deterministic labelled corpus whose labels depend on word order.

Every sentence has a mirror with exactly the same words and the opposite
label, and the generator picks either with equal probability, so a
bag-of-words model stays at chance. Three constructions:

- contrast: "the food was awful but the staff were lovely" - the clause
  after "but" decides;
- negation: "the plot was superb , not dull" - "not" flips the word after it;
- who did what to whom: "our team crushed their team" / "their team crushed
  our team".

    python -m pipeline.demo_corpus --out DIR   # writes DIR/train.csv, DIR/test.csv
"""

import argparse
import csv
import itertools
import os
import random

import tensorflow as tf

from pipeline.files import create

POSITIVE = [
    "good",
    "great",
    "excellent",
    "wonderful",
    "superb",
    "lovely",
    "fantastic",
    "brilliant",
    "pleasant",
    "delightful",
]
NEGATIVE = ["bad", "awful", "terrible", "poor", "dreadful", "boring", "horrible", "dull", "disappointing", "mediocre"]
SUBJECTS = [
    "the food",
    "the service",
    "the movie",
    "the plot",
    "the hotel",
    "the staff",
    "the music",
    "the acting",
    "the room",
    "the price",
    "the book",
    "the ending",
    "the coffee",
    "the view",
    "the game",
]
SIDES = ["team", "players", "band", "school", "club", "side", "lawyers", "army"]
VERBS = ["beat", "defeated", "outplayed", "crushed", "outscored", "outsmarted"]
OPENERS = ["", "", "honestly ,", "i think", "overall ,", "to be fair ,", "well ,"]
CLOSERS = ["", "", "today", "this time", "again", "in the end"]
LABELS = ("negative", "positive")


def _contrast(rng, polarity):
    first, second = rng.sample(SUBJECTS, 2)
    late = rng.choice(POSITIVE if polarity else NEGATIVE)
    early = rng.choice(NEGATIVE if polarity else POSITIVE)
    return f"{first} was {early} but {second} was {late}"


def _negation(rng, polarity):
    kept = rng.choice(POSITIVE if polarity else NEGATIVE)
    negated = rng.choice(NEGATIVE if polarity else POSITIVE)
    return f"{rng.choice(SUBJECTS)} was {kept} , not {negated}"


def _agency(rng, polarity):
    side, verb = rng.choice(SIDES), rng.choice(VERBS)
    winner, loser = ("our", "their") if polarity else ("their", "our")
    return f"{winner} {side} {verb} {loser} {side}"


def sentences(seed):
    """Endless (text, label) pairs, the same for the same seed."""
    rng = random.Random(seed)
    while True:
        polarity = rng.randrange(2)
        sentence = rng.choice([_contrast, _negation, _agency])(rng, polarity)
        words = [rng.choice(OPENERS), sentence, rng.choice(CLOSERS)]
        yield " ".join(w for w in words if w), LABELS[polarity]


def generate(count, seed):
    """The first `count` of `sentences(seed)`."""
    return list(itertools.islice(sentences(seed), count))


def write_demo_corpus(directory, train_size=4000, test_size=1000, seed=0):
    """Writes `train.csv` and `test.csv` (columns text,label); returns their paths.

    The test sentences are drawn after the training ones, skipping any
    sentence the training split has, so that the test split scores
    generalization rather than recall (the draw repeats about one in seven).
    """
    directory = str(directory)
    tf.io.gfile.makedirs(directory)
    drawn = sentences(seed)
    train = list(itertools.islice(drawn, train_size))
    seen = {text for text, _ in train}
    test = list(itertools.islice((row for row in drawn if row[0] not in seen), test_size))
    paths = []
    for name, part in (("train", train), ("test", test)):
        path = os.path.join(directory, f"{name}.csv")
        with create(path) as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(part)
        paths.append(path)
    return tuple(paths)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for train.csv and test.csv")
    parser.add_argument("--train-size", type=int, default=4000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in write_demo_corpus(args.out, args.train_size, args.test_size, args.seed):
        print(path)


if __name__ == "__main__":
    main()
