"""Sample JPEGs are real, varied and deterministic; preprocessing gives the model's input tensor."""

from __future__ import annotations

import numpy as np

from serving.workloads.image.preprocessing import decode_and_preprocess, sample_jpegs


def test_sample_jpegs_are_distinct_realistic_and_deterministic() -> None:
    images = sample_jpegs()
    assert len(set(images)) == len(images) == 8
    assert all(img[:2] == b"\xff\xd8" for img in images)  # JPEG SOI marker
    assert all(5_000 < len(img) < 200_000 for img in images)
    assert images == sample_jpegs.__wrapped__()


def test_preprocessing_gives_normalised_chw_float32() -> None:
    batch = decode_and_preprocess(list(sample_jpegs()[:3]))
    assert batch.shape == (3, 3, 224, 224) and batch.dtype == np.float32
    assert -2.2 < batch.min() < 0 < batch.max() < 2.7
