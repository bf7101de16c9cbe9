"""What a host of the bed does on its object store, as a command (run inside a host's
network namespace, where the store is reachable): the test process itself has no link.

    store_client.py mkbucket BUCKET
    store_client.py upload DIR s3://BUCKET/PREFIX
    store_client.py download s3://BUCKET/PREFIX DIR
    store_client.py list s3://BUCKET/PREFIX          (prints one key per line)

The endpoint and credentials come from the environment (AWS_ENDPOINT_URL, ...).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import boto3


def client():
    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        region_name=os.environ["AWS_REGION"],
    )


def split(url: str) -> tuple[str, str]:
    assert url.startswith("s3://"), url
    bucket, _, prefix = url[len("s3://"):].partition("/")
    return bucket, prefix.rstrip("/")


def keys(c, bucket: str, prefix: str) -> list[str]:
    out = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


def main(argv: list[str]) -> None:
    c = client()
    match argv:
        case ["mkbucket", bucket]:
            c.create_bucket(Bucket=bucket)
        case ["upload", local, url]:
            bucket, prefix = split(url)
            root = Path(local)
            for f in sorted(root.rglob("*")):
                if f.is_file():
                    c.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(root)}")
        case ["download", url, local]:
            bucket, prefix = split(url)
            for key in keys(c, bucket, prefix):
                target = Path(local) / key[len(prefix):].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                c.download_file(bucket, key, str(target))
        case ["list", url]:
            bucket, prefix = split(url)
            print("\n".join(keys(c, bucket, prefix)))
        case _:
            sys.exit(f"usage: {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
