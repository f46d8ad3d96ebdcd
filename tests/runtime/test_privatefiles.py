"""privatefiles: what is read from disk is refused unless only this user could have
written it; folders are made private; writes are atomic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pymlirjit.runtime.privatefiles import (
    Refused,
    check_private_folder,
    make_private_folder,
    read_private,
    write_atomically,
)


def test_folders_and_their_missing_parents_are_made_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        make_private_folder(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert folder.stat().st_mode & 0o777 == 0o700
        assert check_private_folder(folder) is None


@pytest.mark.parametrize(("mode", "owner", "reason"), [
    (0o770, None, "permissions"), (0o702, None, "permissions"), (0o700, 12345, "owner")])
def test_a_folder_open_to_others_or_of_another_user_is_refused(
        tmp_path: Path, mode: int, owner: int | None, reason: str) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    folder.chmod(mode)
    if owner is not None:
        if os.geteuid() != 0:
            pytest.skip("chown needs root")
        os.chown(folder, owner, -1)
    problem = check_private_folder(folder)
    assert problem is not None and problem.reason == reason and str(folder) in problem.detail


def test_reads_refuse_links_other_files_and_open_modes(tmp_path: Path) -> None:
    good = tmp_path / "good"
    write_atomically(good, b"data")
    assert good.stat().st_mode & 0o777 == 0o600
    assert read_private(good, group_may_read=False) == b"data"
    link = tmp_path / "link"
    link.symlink_to(good)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    shared = tmp_path / "shared"
    write_atomically(shared, b"data")
    shared.chmod(0o622)
    for path, reason in [(link, "file-type"), (fifo, "file-type"), (shared, "permissions")]:
        with pytest.raises(Refused) as caught:
            read_private(path, group_may_read=True)
        assert caught.value.reason == reason, path
    shared.chmod(0o640)
    assert read_private(shared, group_may_read=True) == b"data"
    with pytest.raises(Refused, match="open to group or others"):
        read_private(shared, group_may_read=False)
