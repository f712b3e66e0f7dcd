"""Attention maps of a trained model, as an HTML page and PNG heat maps.

    python -m pipeline.visualize --model EXPORT_DIR|MODEL_DIR --out DIR "sentence" ...

Writes DIR/attention.html, a self-contained page (no network fetches; opens
from disk) where you pick a sentence, a layer and a head (or the mean of all
heads), hover or click a token to see where it attends, and read the
token-to-token heat map and the predicted probabilities; and one PNG per
sentence and layer (a grid of heads) for reports. It uses only the exported
SavedModel's `attention` signature. For a model of pairs of texts, each
sentence is its two texts, tab-separated.
"""

import argparse
import json
import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops the SavedModel uses

from pipeline.export import latest_export
from pipeline.files import create
from pipeline.layout import EXPORT_DIR

PAGE_TEMPLATE = os.path.join(os.path.dirname(__file__), "visualize_page.html")


def attention_maps(model_path, sentences):
    """Per sentence: text, tokens (padding left out), attention
    `[layers][heads][tokens][tokens]` and probabilities by class name (a
    regression's `score` instead). A model of pairs of texts takes each
    sentence as its two texts, tab-separated; the tokens show both, [SEP]
    after each."""
    if tf.io.gfile.exists(os.path.join(model_path, "config.json")):  # a training run's directory
        model_path = os.path.join(model_path, EXPORT_DIR)
    loaded = tf.saved_model.load(latest_export(model_path))
    names = [n.decode() for n in loaded.label_names.numpy()]
    signature = loaded.signatures["attention"]
    if "text_pair" in signature.structured_input_signature[1]:
        texts, pairs = zip(*(sentence.partition("\t")[::2] for sentence in sentences))
        outputs = signature(text=tf.constant(texts), text_pair=tf.constant(pairs))
    else:
        outputs = signature(text=tf.constant(sentences))
    results = []
    for i, text in enumerate(sentences):
        length = int(np.count_nonzero(outputs["token_ids"][i].numpy()))
        attention = outputs["attention"][i, :, :, :length, :length].numpy()
        results.append(
            {
                "text": text,
                "tokens": [t.decode("utf-8", "replace") for t in outputs["tokens"][i, :length].numpy()],
                "attention": attention.round(6).tolist(),
                **(
                    {"score": float(outputs["score"][i])}
                    if "score" in outputs
                    else {"probabilities": dict(zip(names, outputs["probabilities"][i].numpy().astype(float).tolist()))}
                ),
            }
        )
    return results


def write_page(maps, path):
    layers, heads = len(maps[0]["attention"]), len(maps[0]["attention"][0])
    data = json.dumps({"num_layers": layers, "num_heads": heads, "sentences": maps}, ensure_ascii=False)
    with open(PAGE_TEMPLATE, encoding="utf-8") as f:
        page = f.read().replace("__DATA__", data.replace("</", "<\\/"))  # no early </script>
    with create(path) as f:
        f.write(page)


def _plotting():
    """pyplot, with Noto Sans CJK (shipped by mplfonts) behind DejaVu Sans so
    that Chinese and Japanese tokens render instead of boxes."""
    try:
        import matplotlib
        import mplfonts
    except ImportError as error:
        raise ImportError(f"PNG heat maps need the visualize extra (pip install -e '.[visualize]'): {error}") from None
    matplotlib.use("Agg")
    from matplotlib import font_manager, pyplot

    font = os.path.join(os.path.dirname(mplfonts.__file__), "fonts", "NotoSansCJKsc-Regular.otf")
    font_manager.fontManager.addfont(font)
    return pyplot, {"font.family": ["DejaVu Sans", font_manager.FontProperties(fname=font).get_name()]}


def write_pngs(maps, directory):
    """One PNG per sentence and layer, a grid of that layer's heads."""
    plt, fonts = _plotting()
    with plt.rc_context(fonts):
        return _write_pngs(plt, maps, directory)


def _write_pngs(plt, maps, directory):
    paths = []
    for index, sentence in enumerate(maps):
        attention, tokens = np.asarray(sentence["attention"]), sentence["tokens"]
        layers, heads = attention.shape[:2]
        columns = min(heads, 4)
        rows = -(-heads // columns)
        size = 0.25 * len(tokens) + 1.5
        for layer in range(layers):
            figure, axes = plt.subplots(rows, columns, figsize=(size * columns, size * rows), squeeze=False)
            for head, axis in enumerate(axes.flat):
                axis.set_axis_off()
                if head >= heads:
                    continue
                axis.set_axis_on()
                axis.imshow(attention[layer, head], cmap="Blues", vmin=0.0, vmax=1.0)
                axis.set_title(f"head {head + 1}", fontsize=9)
                axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
                axis.set_yticks(range(len(tokens)), tokens, fontsize=7)
            figure.suptitle(f"layer {layer + 1}: {sentence['text'][:80]}", fontsize=10)
            figure.tight_layout()
            path = os.path.join(directory, f"sentence{index + 1}_layer{layer + 1}.png")
            figure.savefig(path, dpi=100)
            plt.close(figure)
            paths.append(path)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--model", required=True, help="export directory (or a version in it), or a model directory")
    parser.add_argument("--out", required=True, help="directory for attention.html and the PNGs")
    parser.add_argument(
        "sentences", nargs="+", help="sentences to show (of a model of pairs of texts: two texts, tab-separated)"
    )
    args = parser.parse_args(argv)
    try:
        maps = attention_maps(args.model, args.sentences)
    except ValueError as error:
        sys.exit(f"error: {error}")
    os.makedirs(args.out, exist_ok=True)
    page = os.path.join(args.out, "attention.html")
    write_page(maps, page)
    print(page)
    try:
        paths = write_pngs(maps, args.out)
    except ImportError as error:
        sys.exit(f"error: {error}")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
