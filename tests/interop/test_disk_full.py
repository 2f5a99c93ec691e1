"""A local warehouse on a file system that fills up (a 2 MiB tmpfs): every request that
cannot be written answers 503 code 17 and changes nothing, reads keep working, no record
is damaged, and once space is freed the gateway carries on by itself; fsck finds the
warehouse clean."""

import json
import os
import subprocess
import tempfile
import time

import pytest

from conftest import gateway_binary, start_gateway
from security import call, enc

SERVICE_UNAVAILABLE = 17


@pytest.fixture
def small_disk():
    mount = tempfile.mkdtemp(prefix="lg-full-")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run([*sudo, "mount", "-t", "tmpfs", "-o", "size=2m,mode=1777", "tmpfs", mount], check=True)
    try:
        yield mount
    finally:
        subprocess.run([*sudo, "umount", "-l", mount], check=False)
        os.rmdir(mount)


def fill(path: str) -> None:
    """Takes every free byte of the file system `path` is on, in one file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    # Free a little, so the gateway starts out able to write and then runs out.
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(max(0, size - 48 * 1024))


def test_a_full_disk_gives_clean_errors_and_damages_nothing(small_disk):
    wh = os.path.join(small_disk, "wh")
    gw = start_gateway(["--warehouse", wh, "--recovery-grace-secs", "2", "--recovery-interval-secs", "1"])
    try:
        assert call(gw.uri, "POST", "/v1/namespace/ml/create", {})[0] == 200
        filler = os.path.join(small_disk, "filler")
        fill(filler)
        made, refused = [], 0
        for i in range(400):
            status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', f't{i:03d}'])}/declare",
                                   {"properties": {"pad": "x" * 512}})
            if status == 200:
                made.append(f"t{i:03d}")
            else:
                assert (status, body.get("code")) == (503, SERVICE_UNAVAILABLE), body
                refused += 1
            if refused >= 20:
                break
        assert refused >= 20, "the file system never filled up"
        # Reads still work, and show exactly the tables whose declare was answered 200.
        status, body, _ = call(gw.uri, "GET", "/v1/namespace/ml/table/list?include_declared=true&limit=1000")
        assert status == 200 and sorted(body["tables"]) == made
        for name in made:
            assert call(gw.uri, "POST", f"/v1/table/{enc(['ml', name])}/describe", {})[0] == 200
        # Space comes back: the same gateway carries on.
        os.remove(filler)
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(['ml', 'after'])}/declare", {})
        assert status == 200, body
        time.sleep(3)  # a sweep settles anything a refused request left behind
    finally:
        assert gw.stop() == 0
    out = subprocess.run([gateway_binary(), "admin", "fsck", "--json", "--warehouse", wh],
                         capture_output=True, text=True)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["report"]["findings"] == [], report
    assert report["report"]["tables"] == len(made) + 1
