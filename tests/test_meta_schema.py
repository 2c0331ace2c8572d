"""dataloader/meta_schema.py: meta/info.json and meta/modality.json checked field by field; a bad value is a one-line
DataError naming the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from DiT4DiT.dataloader.errors import DataError
from DiT4DiT.dataloader.meta_schema import check_info, check_modality, image_size

INFO = Path("meta/info.json")
GOOD = {"codebase_version": "v2.1", "fps": 25, "chunks_size": 1000,
        "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "features": {"action": {"dtype": "float32", "shape": [14]},
                     "observation.images.top": {"dtype": "video", "shape": [224, 224, 3], "info": {"video.fps": 25}}}}


def test_a_good_info_is_returned_as_it_is():
    assert check_info(GOOD, INFO) is GOOD


@pytest.mark.parametrize("change, message", [
    ({"chunks_size": 0}, "'chunks_size' is 0; it must be a positive integer"),
    ({"chunks_size": True}, "'chunks_size' is True"),
    ({"fps": -1}, "'fps' is -1; it must be a positive number"),
    ({"data_path": ""}, "'data_path' is ''; it must be the parquet path template"),
    ({"codebase_version": 2.1}, "write it as a string"),
    ({"features": {"action": {"dtype": "float32", "shape": []}}}, r"features.action.shape is \[\]"),
    ({"features": {"action": {"shape": [14]}}}, "features.action needs a 'dtype' string"),
    ({"features": {"cam": {"dtype": "video", "shape": [1, 2, 3], "info": {"video.fps": 0}}}},
     r"features.cam.info\['video.fps'\] is 0"),
])
def test_each_bad_field_is_named_with_its_fix(change, message):
    with pytest.raises(DataError, match=f"^meta/info.json: .*{message}"):
        check_info({**GOOD, **change}, INFO)


def test_a_missing_key_and_a_list_are_refused():
    with pytest.raises(DataError, match="key 'data_path' is missing"):
        check_info({"chunks_size": 1000}, INFO)
    with pytest.raises(DataError, match="holds a list, not an object"):
        check_info([], INFO)


@pytest.mark.parametrize("feature, size", [
    ({"shape": [3, 224, 448]}, (224, 448)),  # channel first
    ({"shape": [224, 448, 3]}, (224, 448)),  # channel last
    ({"shape": [448, 224, 3], "names": ["width", "height", "channel"]}, (224, 448)),
    ({"shape": [14]}, None),
])
def test_image_size_reads_either_channel_order_and_the_names(feature, size):
    assert image_size(feature) == size


def test_modality_ranges_must_be_integer_and_forward():
    good = {"state": {"joints": {"start": 0, "end": 14}}, "video": {"top": {"original_key": "observation.images.top"}}}
    assert check_modality(good, Path("meta/modality.json")) is good
    with pytest.raises(DataError, match=r"'state.joints' has start='0', end=14; both must be integers"):
        check_modality({"state": {"joints": {"start": "0", "end": 14}}}, Path("meta/modality.json"))
    with pytest.raises(DataError, match=r"'action.arm' reads \[5:5\], an empty or reversed range"):
        check_modality({"action": {"arm": {"start": 5, "end": 5}}}, Path("meta/modality.json"))
    with pytest.raises(DataError, match=r"regenerate it \(python -m DiT4DiT.tools.modality"):
        check_modality("state", Path("meta/modality.json"))
