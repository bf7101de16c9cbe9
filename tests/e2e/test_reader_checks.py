"""The reader refuses what it must not train on, with a clear error: unfinished outputs,
unknown versions, manifest paths outside the output, shards of another split or of
several outputs; ``verify=True`` and ``coordinator verify`` catch a flipped byte.

Every test starts from a real job output (``coordinator run``) and damages a copy.
"""

from __future__ import annotations

import json
import shutil

import pytest

import probeflow
from probeflow import maxtext_input


from support.outputs import make_output
from support.run import run



@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("reader-checks")


@pytest.fixture(scope="module")
def output(workdir):
    return make_output(workdir, "out")


@pytest.fixture
def copy(output, tmp_path):
    """A copy of the finished output to damage."""
    dst = tmp_path / "copy"
    shutil.copytree(output, dst)
    return dst


def dataset(path, split="train", **kw):
    return probeflow.Dataset(path, split, seq_len=128, batch_size=2, shard_index=0, shard_count=1, **kw)


def test_a_finished_output_reads_by_directory_glob_and_file_list(output):
    with dataset(output) as ds:
        train_rows = ds.num_rows
        next(ds)
    manifest = json.loads((output / "manifest.json").read_text())
    expected = sum(s["rows"] for s in manifest["shards"] if s["split"] == "train")
    assert train_rows == expected > 0
    with dataset(str(output / "train" / "shard-*.array_record")) as ds:
        assert ds.num_rows == expected
    files = sorted(str(p) for p in (output / "test").glob("*.array_record"))
    with dataset(files, split="test", verify=True) as ds:
        assert ds.num_rows == sum(s["rows"] for s in manifest["shards"] if s["split"] == "test")


def test_an_output_without_success_is_refused(copy):
    (copy / "_SUCCESS").unlink()
    for path in [copy, copy / "manifest.json", str(copy / "train" / "shard-*.array_record")]:
        with pytest.raises(probeflow.OutputError, match="no _SUCCESS"):
            dataset(path)


def test_a_glob_of_train_shards_is_not_the_test_split(output):
    with pytest.raises(probeflow.OutputError, match='a "train" shard, asked for split "test"'):
        dataset(str(output / "train" / "shard-*.array_record"), split="test")
    with pytest.raises(probeflow.OutputError, match="refusing to mix splits"):
        probeflow.RowDataSource(str(output / "train" / "shard-00000-of-00004.array_record"), split="test")


def test_the_eval_stream_never_falls_back_to_train_shards(output):
    """MaxText's eval reads the val split, else the test split; with only a glob of
    train shards there is nothing to read it from, which is an error, not the train
    rows."""
    opts = maxtext_input.NetworkOptions(train_files=str(output / "train" / "shard-*.array_record"))
    with pytest.raises(probeflow.OutputError, match="refusing to mix splits"):
        maxtext_input.eval_source(opts)
    opts = maxtext_input.NetworkOptions(train_files=str(output))
    assert maxtext_input.eval_source(opts) == (str(output), "test")
    # Asking for val where there is none is an error, not a fall-back to test.
    with pytest.raises(probeflow.OutputError, match='no shards for split "val"'):
        maxtext_input.eval_source(maxtext_input.NetworkOptions(train_files=str(output), eval_split="val"))


def test_a_manifest_path_outside_the_output_is_refused(copy):
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["shards"][0]["path"] = "../elsewhere/shard-00000-of-00004.array_record"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(probeflow.OutputError, match="leaves the output directory"):
        dataset(copy)
    manifest["shards"][0]["path"] = "/etc/passwd"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(probeflow.OutputError, match="leaves the output directory"):
        dataset(copy)
    verify = run(["verify", str(copy)], check=False)
    assert verify.returncode == 1 and "outside the output" in verify.stderr


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("tokenizer_version", "2", "tokenizer"),
        ("row_format_version", "9", "format"),
        ("manifest_version", 99, "manifest version 99"),
    ],
)
def test_unknown_versions_are_refused(copy, field, value, message):
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest[field] = value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(probeflow.OutputError, match=message):
        dataset(copy)


def test_shards_of_two_outputs_are_refused(workdir, output):
    other = make_output(workdir, "other")
    mixed = [str(output / "train" / "shard-00000-of-00004.array_record"), str(other / "train" / "shard-00001-of-00004.array_record")]
    with pytest.raises(probeflow.OutputError, match="2 different outputs"):
        dataset(mixed)
    with pytest.raises(probeflow.OutputError, match="2 different outputs"):
        dataset([str(output), str(other)])


def test_loose_shards_with_different_shard_counts_are_refused(workdir, output, tmp_path):
    eight = make_output(workdir, "eight", shards=8)
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(output / "train" / "shard-00000-of-00004.array_record", loose)
    shutil.copy(eight / "train" / "shard-00001-of-00008.array_record", loose)
    with pytest.raises(probeflow.OutputError, match="-of-00004, -of-00008"):
        dataset(str(loose / "shard-*.array_record"))
    # Loose files have no manifest to verify against.
    (loose / "shard-00001-of-00008.array_record").unlink()
    with pytest.raises(probeflow.OutputError, match="verify needs"):
        dataset(str(loose / "shard-*.array_record"), verify=True)


def test_a_file_not_in_the_manifest_is_refused(copy):
    stray = copy / "train" / "shard-00007-of-00004.array_record"
    shutil.copy(copy / "train" / "shard-00000-of-00004.array_record", stray)
    with pytest.raises(probeflow.OutputError, match="not in its manifest"):
        dataset(str(copy / "train" / "shard-*.array_record"))
    verify = run(["verify", str(copy)], check=False)
    assert verify.returncode == 1
    assert "train/shard-00007-of-00004.array_record is not listed in _SUCCESS" in verify.stderr, verify.stderr


def test_verify_catches_one_flipped_byte(copy):
    manifest = json.loads((copy / "manifest.json").read_text())
    shard = next(s for s in manifest["shards"] if s["split"] == "train" and s["rows"] > 0)
    path = copy / shard["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))

    verify = run(["verify", str(copy)], check=False)
    assert verify.returncode == 1
    assert shard["path"] in verify.stderr and "blake3" in verify.stderr
    with pytest.raises(probeflow.FormatError, match=shard["path"].split("/")[-1] + ".*blake3"):
        dataset(copy, verify=True)
    with pytest.raises(probeflow.FormatError, match="blake3"):
        probeflow.RowDataSource(copy, verify=True)


def test_coordinator_verify_passes_a_sound_output(output):
    proc = run(["verify", str(output)])
    manifest = json.loads((output / "manifest.json").read_text())
    assert f"{len(manifest['shards'])} shards, {manifest['totals']['rows']} rows" in proc.stdout
