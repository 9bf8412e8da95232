"""A documents folder reads only what is inside it, and one bad file never stops it: a link that
leads out of the folder (to a file, to a folder) is skipped and listed, never read, searched or
sent, even when it takes a file's place between the walk and the read; a link that leads nowhere
is skipped with its reason; a file removed while the folder is indexed is forgotten; a reader that
fails on one file costs that file only. Real files, real links, real SQLite."""

from __future__ import annotations

import os
import time

import pytest

from draftscope.documents.folder import FolderIndex

SECRET = "BEGIN OPENSSH PRIVATE KEY the archive room key is kestrel"


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture
def home(tmp_path):
    """A user's private file outside the documents folder, and the folder itself."""
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text(SECRET + "\n")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.md").write_text("The archive room is on the second floor.\n")
    return tmp_path


def leaked(index: FolderIndex) -> bool:
    return any("kestrel" in p.text for p in index.search("archive room key kestrel", 4000, words))


def test_links_out_of_the_folder_are_skipped_listed_and_never_searched(home):
    folder = home / "docs"
    (folder / "key.txt").symlink_to(home / "home" / ".ssh" / "id_rsa")
    (folder / "keys").symlink_to(home / "home" / ".ssh", target_is_directory=True)
    (folder / "alias.md").symlink_to(folder / "notes.md")  # stays inside: may be read
    (folder / "sub").mkdir()
    (folder / "sub" / "up").symlink_to(folder, target_is_directory=True)  # loops back: not walked again
    index = FolderIndex(folder, home / "index.sqlite3")
    report = index.refresh()
    assert not leaked(index), "the private key is never put in an answer's prompt"
    assert sorted(report.skipped) == ["key.txt", "keys"]
    assert report.files == 2 and not report.problems, "notes.md, and alias.md that leads to it"
    assert any(p.source == "alias.md" for p in index.search("archive room floor", 4000, words))
    index.close()


def test_a_file_that_becomes_a_link_out_of_the_folder_is_forgotten(home):
    folder = home / "docs"
    (folder / "plan.txt").write_text("The archive room plan.\n")
    index = FolderIndex(folder, home / "index.sqlite3")
    assert index.refresh().files == 2
    (folder / "plan.txt").unlink()
    (folder / "plan.txt").symlink_to(home / "home" / ".ssh" / "id_rsa")
    report = index.refresh()
    assert not leaked(index)
    assert report.skipped == ("plan.txt",) and report.forgotten == 1 and report.files == 1
    index.close()


def test_a_file_swapped_for_a_link_between_the_walk_and_the_read_is_not_read(home):
    """The swap is made from the progress report, said just before the file is read."""
    folder = home / "docs"
    (folder / "plan.txt").write_text("The archive room plan.\n")
    index = FolderIndex(folder, home / "index.sqlite3")

    def swap(done, total, name):
        if name == "plan.txt":
            (folder / "plan.txt").unlink()
            (folder / "plan.txt").symlink_to(home / "home" / ".ssh" / "id_rsa")

    report = index.refresh(swap)
    assert not leaked(index)
    assert report.skipped == ("plan.txt",) and report.files == 1
    index.close()


def test_a_dangling_link_is_skipped_with_its_reason_and_the_rest_indexed(home):
    folder = home / "docs"
    (folder / "gone.txt").symlink_to(home / "nowhere.txt")
    (folder / "loop.txt").symlink_to(folder / "loop.txt")
    index = FolderIndex(folder, home / "index.sqlite3")
    report = index.refresh()
    assert report.files == 1 and index.search("archive room floor", 400, words)
    assert sorted(report.problems) == [
        "gone.txt is a link to nothing (what it pointed at is gone)",
        "loop.txt is a link to nothing (what it pointed at is gone)",
    ]
    index.close()


def test_files_removed_while_the_folder_is_indexed_are_forgotten(home):
    folder = home / "docs"
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text(f"File {name} tells where the archive room is.\n")
    index = FolderIndex(folder, home / "index.sqlite3")
    assert index.refresh().files == 4
    later = time.time() + 5
    for name in ("a.txt", "b.txt", "c.txt"):
        os.utime(folder / name, (later, later))  # changed: each is read again

    def remove(done, total, name):
        if name == "a.txt":
            (folder / "b.txt").unlink()  # listed, then gone before it is looked at
        if name == "c.txt":
            (folder / "c.txt").unlink()  # looked at, then gone before it is read

    report = index.refresh(remove)
    assert report.forgotten == 2 and not report.problems
    assert report.files == 2 and report.read == 1
    assert {p.source for p in index.search("archive room", 4000, words)} == {"a.txt", "notes.md"}
    index.close()


def test_a_reader_that_fails_on_one_file_costs_that_file_only(home, monkeypatch):
    from draftscope.documents import extract
    from draftscope.documents import folder as folder_module

    real = extract.read_bytes

    def fragile(name, data, mime=None):
        if name.endswith("odd.txt"):
            raise RuntimeError("the reader tripped")
        return real(name, data, mime)

    monkeypatch.setattr(extract, "read_bytes", fragile)
    monkeypatch.setattr(folder_module, "read_bytes", fragile, raising=False)
    folder = home / "docs"
    (folder / "odd.txt").write_text("odd\n")
    index = FolderIndex(folder, home / "index.sqlite3")
    report = index.refresh()
    assert report.files == 1 and index.search("archive room floor", 400, words)
    assert report.problems == ("odd.txt could not be read: RuntimeError: the reader tripped",)
    index.close()
