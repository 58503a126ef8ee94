"""The images requests carry (serving.workloads.image.corpus): the synthetic corpus, a user's folder with labels, and
the pool of distinct requests each client sends in turn."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from experiments.config.compose import load_config
from experiments.config.errors import ConfigError
from experiments.config.validation import validate
from serving.clients.base import ClientSpec
from serving.oip.clients import OipHttpClient
from serving.workloads.image.corpus import CorpusError, InputSource, folder_corpus, request_pool, synthetic_corpus


def _spec(input_format: str = "jpeg", batch: int = 1, **inputs) -> ClientSpec:
    return ClientSpec("serving.oip.clients.OipHttpClient", "http://127.0.0.1:1", "m", input_format, batch,
                      (3, 224, 224), (1000,), inputs=InputSource(**inputs))


def test_the_synthetic_corpus_is_500_distinct_images_from_thumbnails_to_12_megapixels() -> None:
    corpus = synthetic_corpus()
    assert len(corpus) == 512 and len(set(corpus.images)) == 512
    sizes = [Image.open(io.BytesIO(image)).size for image in (corpus.images[0], corpus.images[-1])]
    assert sizes == [(96, 96), (4000, 3000)]
    megapixels = np.array(corpus.pixels) / 1e6
    assert 0.05 < np.median(megapixels) < 1.0 and (megapixels > 2).sum() >= 10  # mostly small, some a camera's
    stats = corpus.stats()
    assert stats["corpus_bytes_min"] < 5_000 < stats["corpus_bytes_p50"] < 100_000 < stats["corpus_bytes_max"]


def test_each_request_of_the_pool_carries_other_images_and_the_pool_stops_at_its_budget() -> None:
    pool = request_pool(_spec("jpeg", batch=4))
    assert len(pool) == 128 and len({inputs.images for inputs in pool}) == 128  # the corpus once over
    assert [i for inputs in pool for i in inputs.indices] == list(range(512))
    tensors = request_pool(_spec("tensor", batch=2, pool_mib=5))
    assert len(tensors) == 5 * 2**20 // (2 * 602_112) and tensors[0].tensor.shape == (2, 3, 224, 224)
    assert not np.array_equal(tensors[0].tensor, tensors[1].tensor)


def test_the_repeated_input_is_one_request_of_typical_size() -> None:
    (repeated,) = request_pool(_spec("jpeg", repeated=True))
    files = sorted(len(image) for image in synthetic_corpus().images)
    assert len(repeated.images[0]) == files[len(files) // 2]


def test_clients_sharing_a_load_start_at_other_requests_and_send_every_one_in_turn() -> None:
    first, second = OipHttpClient(_spec()), OipHttpClient(_spec())
    second.start_at(0.618)
    assert first.pool[0] != second.pool[0] and sorted(first.pool, key=lambda r: r.indices) == \
        sorted(second.pool, key=lambda r: r.indices)
    stats = first.pool_stats
    assert stats.distinct_requests == stats.distinct_images == 512
    assert stats.bytes_per_image[0] == pytest.approx(synthetic_corpus().stats()["corpus_bytes_mean"])


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, fmt in (("a.jpg", "JPEG"), ("b.png", "PNG"), ("c.webp", "WEBP")):
        Image.fromarray(rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)).save(folder / name, format=fmt)
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_a_folder_of_jpeg_png_and_webp_is_sent_as_jpegs_with_its_labels(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    labels = tmp_path / "labels.csv"
    labels.write_text("file,class\na.jpg,3\nb.png,7\nc.webp,1\n")
    corpus = folder_corpus(str(folder), str(labels))
    assert corpus.files == ("a.jpg", "b.png", "c.webp") and corpus.labels == (3, 7, 1)
    assert all(Image.open(io.BytesIO(image)).format == "JPEG" for image in corpus.images)
    (inputs,) = request_pool(_spec("jpeg", batch=3, source=str(folder), labels=str(labels)))
    assert inputs.labels == (3, 7, 1)


def test_bad_inputs_are_refused_naming_the_key_and_the_fix(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    partial = tmp_path / "partial.csv"
    partial.write_text("a.jpg,3\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {f"experiment.inputs.source={tmp_path / 'nowhere'}": "not a folder",
             f"experiment.inputs.source={empty}": "no images there",
             "experiment.inputs.labels=labels.csv": "the synthetic corpus has no classes",
             "experiment.inputs.pool_mib=0": "MiB of distinct requests",
             "experiment.inputs.audit_max_speedup=1.5": "in (0, 1)"}
    for override, fix in cases.items():
        with pytest.raises(ConfigError, match=r"experiment\.inputs\.") as info:
            validate(load_config(["experiment=quick", override]))
        assert fix in str(info.value), (override, str(info.value))
    with pytest.raises(ConfigError, match="no label for 2 of the 3 images"):
        validate(load_config(["experiment=quick", f"experiment.inputs.source={folder}",
                              f"experiment.inputs.labels={partial}"]))
    with pytest.raises(CorpusError, match="line 1"):
        bad = tmp_path / "bad.csv"
        bad.write_text("a.jpg,cat,3\n")
        folder_corpus(str(folder), str(bad))


def test_the_report_says_what_the_requests_carried() -> None:
    import pandas as pd

    from experiments.report.method_section import inputs_lines

    ok = pd.DataFrame({"inputs": ["synthetic-seed0-n512"] * 3, "input_format": ["jpeg", "jpeg", "tensor"],
                       "payload_image_bytes_p50": [18_882.5, 18_882.5, 602_112.0],
                       "payload_image_bytes_min": [1_325.0, 1_325.0, 602_112.0],
                       "payload_image_bytes_max": [2_513_848.0, 2_513_848.0, 602_112.0],
                       "distinct_images": [512.0, 512.0, 111.0], "input_repeats": [0.2, 0.5, 3.0]})
    (line,) = inputs_lines(ok)
    assert "synthetic-seed0-n512" in line and "jpeg: 18.9 KB per image at the median (1.3 KB to 2,513.8 KB)" in line
    assert "tensor: 602.1 KB" in line and "At most 3.0 requests per distinct request" in line
    assert inputs_lines(ok.drop(columns="payload_image_bytes_p50")) == []
