"""OpenFiles: kernel files re-read through descriptors kept open, plain files checked for removal."""

from __future__ import annotations

import os
import subprocess
import sys

from agent.core.openfiles import OpenFiles, regenerated


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kernel_files_are_read_afresh_and_a_gone_process_reads_none(tmp_path):
    files = OpenFiles()
    io = f"/proc/{os.getpid()}/io"
    before = int(files.read(io).split("rchar:")[1].split()[0])
    (tmp_path / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "f").read_bytes()
    after = int(files.read(io).split("rchar:")[1].split()[0])
    assert after >= before + 100_000 and len(files) == 1  # the same descriptor, new content
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    path = f"/proc/{child.pid}/stat"
    assert files.read(path).startswith(f"{child.pid} (python")
    child.stdin.close()
    child.wait()
    assert files.read(path) is None  # ESRCH on the kept descriptor, and the path is gone
    files.close()


def test_plain_files_replaced_or_removed(tmp_path):
    files = OpenFiles()
    p = tmp_path / "stat"
    p.write_text("one")
    assert files.read(str(p)) == "one"
    p.write_text("two")  # rewritten in place
    assert files.read(str(p)) == "two"
    p.unlink()
    p.write_text("three")  # replaced by a new file
    assert files.read(str(p)) == "three"
    p.unlink()
    assert files.read(str(p)) is None
    assert files.read(str(tmp_path / "never")) is None


def test_sweep_limit_and_close(tmp_path):
    start = _fds()
    files = OpenFiles(limit=3)
    paths = []
    for i in range(5):
        p = tmp_path / f"f{i}"
        p.write_text(str(i))
        paths.append(str(p))
        assert files.read(str(p)) == str(i)
    assert len(files) == 3 and _fds() == start + 3  # the two oldest were closed
    files.sweep()
    files.read(paths[4])
    files.sweep()  # only f4 was read since the last sweep
    assert len(files) == 1
    files.close()
    assert len(files) == 0 and _fds() == start


def test_regenerated():
    for path, expected in (("/proc/self/stat", True), ("/sys/kernel", True), (__file__, False)):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            assert regenerated(fd) is expected, path
        finally:
            os.close(fd)
