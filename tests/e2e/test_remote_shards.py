"""Reading an output straight from an object store (moto's S3 server on loopback):
``probeflow.Dataset("s3://bucket/out")`` fetches shards into a node-local cache shared by
the processes of a node, verified against the manifest, and gives exactly the batches
of the same output on local disk.

Readers run in their own processes (as training ranks do): each prints the digest of
its batches and its cache counters (``probeflow.cache_stats()``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


from support.outputs import READER, make_output
from support.s3 import BUCKET


def run_reader(env: dict, path: str | list[str], cache: Path | None, args: dict) -> subprocess.CompletedProcess:
    env = dict(env)
    if cache is not None:
        env["PROBEFLOW_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-c", READER, json.dumps({"path": path, **args})],
        env=env, capture_output=True, text=True, check=False,
    )


def read(env: dict, path: str | list[str], cache: Path | None = None, **args) -> dict:
    out = run_reader(env, path, cache, args)
    if out.returncode != 0:
        raise AssertionError(f"reader failed:\n{out.stderr}")
    return json.loads(out.stdout)


def read_error(env: dict, path: str, cache: Path, **args) -> str:
    out = run_reader(env, path, cache, args)
    assert out.returncode != 0, out.stdout
    return out.stderr.strip().splitlines()[-1]


def upload(client, local: Path, prefix: str) -> str:
    for f in sorted(local.rglob("*")):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"{prefix}/{f.relative_to(local)}")
    return f"s3://{BUCKET}/{prefix}"


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def cached_files(cache: Path) -> dict[str, int]:
    return {f.name: f.stat().st_size for f in (cache / "shards").glob("*.array_record")}


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    return make_output(tmp_path_factory.mktemp("remote-shards"), "out")


@pytest.fixture(scope="module")
def remote(s3, output):  # noqa: F811
    client, _ = s3
    return upload(client, output, "remote/out")


def split_shards(output: Path, split: str) -> list[dict]:
    return [s for s in manifest(output)["shards"] if s["split"] == split]


def test_cold_then_warm_cache_gives_the_local_batches_downloading_each_shard_once(
    s3, output, remote, tmp_path  # noqa: F811
):
    _, env = s3
    local = read(env, str(output))
    cache = tmp_path / "cache"
    cold = read(env, remote, cache)
    assert cold["digest"] == local["digest"] and cold["batches"] == local["batches"] > 0
    train = split_shards(output, "train")
    assert cold["files"] == [f"{remote}/{s['path']}" for s in train]
    assert cold["stats"]["downloads"] == len(train)
    assert cold["stats"]["downloaded_bytes"] == sum(s["bytes"] for s in train)
    # Cached by content: the file is named by the manifest's blake3.
    assert cached_files(cache) == {f"{s['blake3']}.array_record": s["bytes"] for s in train}
    assert not list((cache / "shards").glob("*.part-*")), "no partial download left"

    warm = read(env, remote, cache)
    assert warm["digest"] == local["digest"]
    assert warm["stats"]["downloads"] == 0
    assert warm["stats"]["hits"] >= len(train)

    # A mixture may take a remote source beside a local one.
    mixed = read(env, [remote, str(output)], cache, options={"weights": [1, 3]})
    assert mixed["digest"] == read(env, [str(output), str(output)], options={"weights": [1, 3]})["digest"]
    # The manifest's URL reads the same output; so do two ranks, each as locally.
    assert read(env, f"{remote}/manifest.json", cache)["digest"] == local["digest"]
    for rank in range(2):
        assert (
            read(env, remote, cache, rank=rank, ranks=2)["digest"]
            == read(env, str(output), rank=rank, ranks=2)["digest"]
        )


def test_a_state_resumes_on_a_copy_of_its_output_wherever_it_is_stored(
    s3, output, remote, tmp_path  # noqa: F811
):
    """A state is tied to the output's rows, not to where they are stored: taken on the
    local output, it resumes on the object store's copy and on a glob of the local
    files, with the same batches; and the other way round."""
    _, env = s3
    cache = tmp_path / "cache"
    local = read(env, str(output), stop_after=3)
    rest = read(env, str(output), state=local["state"])
    assert rest["batches"] > 0
    assert read(env, remote, cache, state=local["state"])["digest"] == rest["digest"]
    files = str(output / "train" / "shard-*.array_record")
    assert read(env, files, state=local["state"])["digest"] == rest["digest"]
    from_store = read(env, remote, cache, stop_after=3)
    assert from_store["state"] == local["state"]
    assert read(env, str(output), state=from_store["state"])["digest"] == rest["digest"]
    # The other split has other rows: refused, saying so.
    other = run_reader(env, str(output), None, {"split": "test", "state": local["state"]})
    assert other.returncode != 0 and "other rows" in other.stderr, other.stderr[-2000:]


def test_four_processes_share_one_cold_cache_and_download_each_shard_once(
    s3, output, remote, tmp_path  # noqa: F811
):
    _, env = s3
    cache = tmp_path / "cache"
    env = dict(env, PROBEFLOW_CACHE_DIR=str(cache))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER, json.dumps({"path": remote, "rank": r, "ranks": 4})],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    train = split_shards(output, "train")
    assert sum(r["stats"]["downloads"] for r in results) == len(train)
    for rank, r in enumerate(results):
        assert r["digest"] == read(env, str(output), rank=rank, ranks=4)["digest"]
    assert len(cached_files(cache)) == len(train)


def corrupt_in_place(path: Path, keep_mtime: bool) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    # In place (same inode, same size), as a disk or another program might.
    with open(path, "r+b") as f:
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_corrupted_cached_shard_is_detected_and_fetched_again(s3, output, remote, tmp_path):  # noqa: F811
    _, env = s3
    local = read(env, str(output))
    cache = tmp_path / "cache"
    read(env, remote, cache)
    victim = sorted((cache / "shards").glob("*.array_record"))[1]
    good = victim.read_bytes()
    corrupt_in_place(victim, keep_mtime=False)
    # What a download killed midway leaves is cleared when the shard is next fetched.
    leftover = victim.with_name(victim.name.replace(".array_record", ".part-99999-0"))
    leftover.write_bytes(b"half a shard")
    again = read(env, remote, cache)
    assert not leftover.exists()
    assert again["stats"]["refetched"] == 1 and again["stats"]["downloads"] == 1
    assert again["digest"] == local["digest"]
    assert victim.read_bytes() == good

    # Changed without a trace in its metadata: verify=True hashes every cached shard.
    corrupt_in_place(victim, keep_mtime=True)
    verified = read(env, remote, cache, options={"verify": True})
    assert verified["stats"]["refetched"] == 1 and verified["stats"]["downloads"] == 1
    assert verified["digest"] == local["digest"]
    assert victim.read_bytes() == good


def test_a_small_limit_evicts_the_least_recently_used_shards(s3, output, remote, tmp_path):  # noqa: F811
    _, env = s3
    cache = tmp_path / "cache"
    train, test = split_shards(output, "train"), split_shards(output, "test")
    train_bytes, test_bytes = sum(s["bytes"] for s in train), sum(s["bytes"] for s in test)
    limit = max(train_bytes, test_bytes) + 1
    assert limit < train_bytes + test_bytes
    opts = {"cache_limit": limit}
    local_train = read(env, str(output))["digest"]

    first = read(env, remote, cache, options=opts)
    assert first["digest"] == local_train and first["stats"]["evicted"] == 0
    # Reading test next needs room: train's shards go, least recently used first.
    tested = read(env, remote, cache, split="test", options=opts)
    assert tested["digest"] == read(env, str(output), split="test")["digest"]
    assert tested["stats"]["evicted"] > 0
    assert sum(cached_files(cache).values()) <= limit
    assert {f"{s['blake3']}.array_record" for s in test} <= set(cached_files(cache))
    # Train again: fetched again, the same batches, test's shards evicted in turn.
    again = read(env, remote, cache, options={"cache_limit": str(limit)})
    assert again["digest"] == local_train
    assert again["stats"]["downloads"] > 0 and again["stats"]["evicted"] > 0
    assert sum(cached_files(cache).values()) <= limit

    # A limit below what one process reads is an error, not a run that downloads the
    # split again every epoch.
    err = read_error(env, remote, cache, options={"cache_limit": train_bytes - 1})
    assert "InvalidInputError" in err and f"at least {train_bytes} bytes" in err, err


def test_remote_errors_are_clear_and_leave_nothing_behind(s3, output, tmp_path):  # noqa: F811
    client, env = s3
    cache = tmp_path / "cache"
    # An unfinished output (no _SUCCESS).
    unfinished = upload(client, output, "unfinished/out")
    client.delete_object(Bucket=BUCKET, Key="unfinished/out/_SUCCESS")
    err = read_error(env, unfinished, cache)
    assert "OutputError" in err and "no _SUCCESS" in err, err
    # Nothing there.
    err = read_error(env, f"s3://{BUCKET}/nothing/here", cache)
    assert "FileNotFoundError" in err and "nothing/here/manifest.json" in err, err
    # A shard on the store that is not what the manifest says: refused, named, and
    # nothing of it is left in the cache.
    tampered = upload(client, output, "tampered/out")
    first = split_shards(output, "train")[0]
    data = bytearray((output / first["path"]).read_bytes())
    data[100] ^= 1
    client.put_object(Bucket=BUCKET, Key=f"tampered/out/{first['path']}", Body=bytes(data))
    err = read_error(env, tampered, cache)
    assert "FormatError" in err and f"{tampered}/{first['path']}" in err, err
    assert "does not match the manifest" in err, err
    assert f"{first['blake3']}.array_record" not in cached_files(cache)
    parts = list((cache / "shards").glob("*.part-*"))
    assert not parts, (parts, first["blake3"], [s["blake3"] for s in split_shards(output, "train")])
    # A shard on the store shorter than the manifest says: not downloaded, refused.
    short = upload(client, output, "short/out")
    client.put_object(Bucket=BUCKET, Key=f"short/out/{first['path']}", Body=b"too short")
    err = read_error(env, short, cache)
    assert "FormatError" in err and f"9 bytes, the manifest says {first['bytes']}" in err, err
    # Globs and single shards are not read from object stores; the error says what is.
    err = read_error(env, f"{tampered}/train/shard-*.array_record", cache)
    assert "InvalidInputError" in err and "give the output's root" in err, err
    # A bad limit.
    err = read_error(env, tampered, cache, options={"cache_limit": "lots"})
    assert "InvalidInputError" in err and "not a size" in err, err
