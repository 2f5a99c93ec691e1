"""CPU and time per GetObject for the two S3 clients in the binary (aws-sdk-s3 and
object_store), against the pinned SeaweedFS on loopback: why the S3 store reads single
objects through object_store (`src/store/s3_reads.rs`). Runs `bench/s3_get.rs` (built by
`bench/run`) `--rounds` times.

Usage: python bench/s3_get.py [--gets 3000] [--rounds 3]
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))

import seaweedfs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gets", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    example = os.path.join(os.environ["CARGO_TARGET_DIR"], "release", "examples", "s3_get")
    sw = seaweedfs.start()
    try:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY,
               "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET}
        for _ in range(args.rounds):
            subprocess.run([example, sw.endpoint, "s3-get-bench", str(args.gets)], env=env, check=True)
    finally:
        sw.stop()


if __name__ == "__main__":
    main()
