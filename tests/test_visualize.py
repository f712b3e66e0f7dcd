import json
import os
import re
import shutil
import warnings

import numpy as np
import pytest

from conftest import NAMES
from pipeline.visualize import attention_maps, write_page, write_pngs

SENTENCES = ["the cat sat on the mat", "北京天安门", ""]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def page(exported, tmp_path_factory):
    directory = tmp_path_factory.mktemp("visualize")
    maps = attention_maps(exported[2], SENTENCES)
    path = str(directory / "attention.html")
    write_page(maps, path)
    return maps, path, directory


def _page_data(path):
    html = open(path, encoding="utf-8").read()
    return json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1))


def test_shown_weights_sum_to_one_over_non_padding_keys(page):
    maps, path, _ = page
    data = _page_data(path)
    assert data["num_layers"] == 2 and data["num_heads"] == 2
    assert [s["tokens"] for s in data["sentences"]][1:] == [["[CLS]", "北", "京", "天", "安", "门"], ["[CLS]"]]
    for sentence in data["sentences"]:
        attention = np.asarray(sentence["attention"])  # (layers, heads, tokens, tokens): padding left out
        assert attention.shape[2:] == (len(sentence["tokens"]),) * 2
        np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-4)
        assert list(sentence["probabilities"]) == NAMES
    assert "http" not in open(path).read().split("<script")[0]  # nothing fetched


def test_one_png_per_sentence_and_layer(page):
    maps, _, directory = page
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_pngs(maps, str(directory))
    assert not [str(w.message) for w in caught if "missing from font" in str(w.message)]  # 北京天安门 renders
    assert len(paths) == len(SENTENCES) * 2
    for path in paths:
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (.ci/run installs Debian's)")
def test_page_in_headless_chromium(page, tmp_path):
    from playwright.sync_api import sync_playwright

    _, path, _ = page
    errors = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        view = browser.new_page()
        view.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        view.on("pageerror", lambda e: errors.append(str(e)))
        view.goto("file://" + os.path.abspath(path))
        assert view.locator("#heat tr").count() == 1 + 7  # header + "[CLS] the cat sat on the mat"
        attention = np.asarray(_page_data(path)["sentences"][0]["attention"])

        def shown_row(query):
            cells = view.locator("#heat tr").nth(query + 1).locator("td")
            return [float(cells.nth(k).get_attribute("data-weight")) for k in range(7)]

        # Opens on layer 1, the mean of all heads.
        np.testing.assert_allclose(shown_row(0), attention[0, :, 0].mean(0), atol=1e-6)
        view.select_option("#layer", label="2")  # labels count from 1
        view.select_option("#head", label="2")
        view.locator(".token").nth(2).hover()
        assert view.locator(".token.selected").inner_text() == "cat"
        np.testing.assert_allclose(shown_row(2), attention[1, 1, 2], atol=1e-6)
        assert abs(sum(shown_row(2)) - 1.0) < 1e-4
        view.select_option("#head", label="all heads (mean)")
        view.select_option("#sentence", label=SENTENCES[1])
        assert view.locator(".token").all_inner_texts() == ["[CLS]", "北", "京", "天", "安", "门"]
        view.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        browser.close()
    assert errors == []
    assert os.path.getsize(tmp_path / "page.png") > 1000
