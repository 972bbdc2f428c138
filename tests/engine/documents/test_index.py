"""The index without vectors: keyword search, failures listed, incremental re-index, pause and cancel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from engine.documents import IndexControl, Indexer
from engine.documents.search import search
from engine.documents.watcher import FolderWatcher
from tests.engine.documents.conftest import name_of


def _add(index, corpus: Path, name: str = "home"):
    index.create(name, "all-MiniLM-L6-v2")
    index.add_sources(name, [corpus])
    return Indexer(index).run(name)


def _top(index, query: str, name: str = "home", k: int = 3):
    hits, mode = search(index, index.get(name), query, k=k)
    assert mode == "keyword"
    return hits


def test_a_corrupt_pdf_is_listed_as_failed_while_the_rest_index(index, corpus: Path):
    progress = _add(index, corpus)
    assert progress.phase == "done"
    assert [Path(f.path).name for f in progress.failed] == ["broken.pdf"]
    info = index.info("home")
    assert info.files == 4  # pdf, md, html, txt; the png is not a document
    assert [Path(f.path).name for f in info.failed] == ["broken.pdf"]
    assert "PDF" in info.failed[0].reason
    assert info.chunks >= 8 and info.embedded == 0


def test_keyword_search_finds_the_page_and_heading(index, corpus: Path):
    _add(index, corpus)
    hit = _top(index, "reset thermostat mode button")[0]
    assert (name_of(hit), hit.page) == ("manual.pdf", 2)
    hit = _top(index, "aphids whitefly")[0]
    assert (name_of(hit), hit.heading) == ("garden.md", "Garden notes > Tomatoes > Pests")
    hit = _top(index, "sourdough oven")[0]
    assert (name_of(hit), hit.place) == ("kitchen.html", "Kitchen handbook > Baking")
    assert _top(index, "zeppelin") == []


def _bump(path: Path) -> None:
    st = path.stat()  # a later mtime even on file systems with coarse timestamps
    os.utime(path, (st.st_atime, st.st_mtime + 5))


def test_an_edit_an_addition_and_a_deletion_are_reindexed(index, corpus: Path):
    _add(index, corpus)
    before = index.info("home").chunks

    garden = corpus / "garden.md"
    garden.write_text(garden.read_text().replace("late winter", "early March, when the forsythia blooms"))
    _bump(garden)
    (corpus / "bees.md").write_text("# Bees\n\nThe hive is inspected every nine days in swarming season.\n")
    (corpus / "library.txt").unlink()
    seen = []
    progress = Indexer(index, on_progress=seen.append).run("home")

    # only the edited and the new file were read again
    garden_chunks = len(index.file_chunks(index.get("home"), str(garden.resolve())))
    assert progress.chunks == garden_chunks + 1
    assert _top(index, "forsythia")[0].heading == "Garden notes > Roses"
    assert all("late winter" not in h.text for h in _top(index, "late winter prune"))
    assert name_of(_top(index, "hive swarming")[0]) == "bees.md"
    assert _top(index, "library Sundays") == []
    assert "library.txt" not in {Path(p).name for p in index.files(index.get("home"))}
    assert index.info("home").chunks == before - 1 + 1  # library.txt's one chunk gone, bees.md's come
    assert seen[0].phase == "scanning" and seen[-1].phase == "done"
    # before the first file is read, the progress says how many there are (it said 0 while a slow one was read)
    assert (seen[1].phase, seen[1].files_done, seen[1].files_total) == ("parsing", 0, 5)


def test_a_touched_but_unchanged_file_is_not_parsed_again(index, corpus: Path):
    _add(index, corpus)
    _bump(corpus / "manual.pdf")
    progress = Indexer(index).run("home")
    assert progress.chunks == 0
    assert _top(index, "thermostat")[0].page == 2


def test_a_fixed_file_leaves_the_failed_list(index, corpus: Path):
    from tests.engine.documents.conftest import PDF_PAGES, write_pdf

    _add(index, corpus)
    write_pdf(corpus / "broken.pdf", PDF_PAGES[:1])
    _bump(corpus / "broken.pdf")
    progress = Indexer(index).run("home")
    assert progress.failed == ()
    assert index.info("home").failed == ()


def test_cancel_stops_a_run_and_the_next_run_finishes(index, corpus: Path):
    index.create("home", "all-MiniLM-L6-v2")
    index.add_sources("home", [corpus])
    control = IndexControl()

    def on_progress(p):
        if p.phase == "parsing" and p.files_done >= 1:
            control.cancel()

    progress = Indexer(index, on_progress=on_progress, control=control).run("home")
    assert progress.phase == "cancelled"
    assert progress.files_done < progress.files_total
    assert Indexer(index).run("home").phase == "done"
    assert index.info("home").files == 4


def test_pause_holds_a_run_until_resumed(index, corpus: Path):
    import threading

    index.create("home", "all-MiniLM-L6-v2")
    index.add_sources("home", [corpus])
    control = IndexControl()
    control.pause()
    result = {}
    seen = []
    thread = threading.Thread(target=lambda: result.update(p=Indexer(index, control=control, on_progress=seen.append).run("home")))
    thread.start()
    deadline = time.monotonic() + 30
    while not any(p.paused for p in seen) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(p.paused for p in seen)
    assert thread.is_alive() and "p" not in result
    control.resume()
    thread.join(60)
    assert result["p"].phase == "done" and index.info("home").files == 4


def test_the_watcher_notices_changes_in_a_folder(index, corpus: Path):
    _add(index, corpus)
    changed = []
    watcher = FolderWatcher(index, changed.append, interval=3600)
    watcher.start()
    try:
        assert watcher.poll() == []
        (corpus / "new.txt").write_text("A new note about compost.")
        assert watcher.poll() == ["home"]
        assert changed == ["home"]
        assert watcher.poll() == []
        (corpus / "new.txt").unlink()
        assert watcher.poll() == ["home"]
    finally:
        watcher.close()


def test_collection_names_are_checked(index):
    from engine.errors import InvalidRequest

    with pytest.raises(InvalidRequest):
        index.create("../etc", "m")
    with pytest.raises(InvalidRequest):
        index.create("", "m")


def test_a_file_whose_name_is_not_utf8_is_listed_and_the_rest_index(index, corpus: Path):
    """One such name stopped the whole run (its path could not be stored), the files after it never read."""
    os.rename(corpus / "library.txt", os.fsencode(corpus) + b"/caf\xe9-library.txt")
    (corpus / "zz-after.txt").write_text("Zebras graze after the bad name.")
    progress = _add(index, corpus)
    assert progress.phase == "done"
    reasons = {Path(f.path).name: f.reason for f in progress.failed}
    assert reasons["caf\ufffd-library.txt"] == "its name is not valid UTF-8; rename it to index it."
    assert name_of(_top(index, "zebras graze")[0]) == "zz-after.txt"


def test_a_source_that_is_away_for_a_while_keeps_its_passages(index, corpus: Path):
    """A folder moved away (an unplugged drive, an unmounted share) lost its whole index at the next run, and was
    parsed and embedded again from nothing when it came back."""
    _add(index, corpus)
    before = index.info("home")
    ids = {path: record.id for path, record in index.files(index.get("home")).items()}
    away = corpus.with_name("docs-away")
    corpus.rename(away)
    progress = Indexer(index).run("home")
    assert [f.reason for f in progress.failed] == ["it no longer exists; remove it or put it back."]
    assert index.info("home").chunks == before.chunks and name_of(_top(index, "aphids whitefly")[0]) == "garden.md"
    away.rename(corpus)
    progress = Indexer(index).run("home")
    assert progress.chunks == 0 and index.info("home").chunks == before.chunks  # nothing parsed again
    assert {path: record.id for path, record in index.files(index.get("home")).items()} == ids


def test_links_out_of_the_folder_or_to_hidden_files_are_not_read(index, corpus: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    (outside / ".ssh").mkdir(parents=True)
    (outside / "secret.txt").write_text("wombat secret 5521")
    (outside / ".ssh" / "notes.txt").write_text("narwhal 7781")
    (corpus / "hidden").mkdir()
    (corpus / ".private").mkdir()
    (corpus / ".private" / "keys.txt").write_text("quokka 3319")
    (corpus / "secret.txt").symlink_to(outside / "secret.txt")
    (corpus / "notes.txt").symlink_to(outside / ".ssh" / "notes.txt")
    (corpus / "keys.txt").symlink_to(corpus / ".private" / "keys.txt")
    (corpus / "hidden" / "again.txt").symlink_to(corpus / "library.txt")  # inside: taken (as the file it names)
    progress = _add(index, corpus)
    assert [Path(f.path).name for f in progress.failed] == ["broken.pdf"]  # nothing about the links either
    assert _top(index, "wombat") == [] and _top(index, "narwhal") == [] and _top(index, "quokka") == []
    assert index.info("home").files == 4


def test_a_pipe_put_in_a_files_place_is_refused_not_waited_on(tmp_path: Path):
    from engine.documents.indexer import file_sha256

    fifo = tmp_path / "c.txt"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        file_sha256(str(fifo))


class _ControlAt(IndexControl):
    """A run's real control that the run itself pauses or cancels at its ``at``-th checkpoint, i.e. part way into
    a long file (one checkpoint a page), and that counts the checkpoints passed (pages read) after that."""

    def __init__(self, action: str, at: int) -> None:
        super().__init__()
        self.action, self.at, self.calls = action, at, 0

    def checkpoint(self, on_pause=None) -> None:
        self.calls += 1
        if self.calls == self.at:
            getattr(self, self.action)()
        super().checkpoint(on_pause)


def test_cancel_inside_a_long_pdf_stops_its_reading_and_keeps_the_index_as_it_was(index, tmp_path: Path):
    """Cancel was checked only between files: a 10,000-page PDF was read to its end (about 8 s here) after Cancel,
    and removing its collection waited for it."""
    from tests.engine.documents.conftest import write_long_pdf

    root = tmp_path / "docs"
    root.mkdir()
    write_long_pdf(root / "long.pdf", 1, text="An old short edition about puffins.")
    _add(index, root)
    write_long_pdf(root / "long.pdf", 3000)
    _bump(root / "long.pdf")
    control = _ControlAt("cancel", at=100)
    progress = Indexer(index, control=control).run("home")
    assert progress.phase == "cancelled"
    assert control.calls < 150  # of 3,000 pages, reading stopped at the first page after Cancel
    # the file's old passages stay, and none of the new edition's was written
    assert name_of(_top(index, "puffins")[0]) == "long.pdf"
    assert _top(index, "kestrel") == []
    assert Indexer(index).run("home").phase == "done"
    assert index.info("home").chunks >= 3000 and _top(index, "puffins") == []


def test_pause_inside_a_long_pdf_holds_its_reading_until_resumed(index, tmp_path: Path):
    import threading

    from tests.engine.documents.conftest import write_long_pdf

    root = tmp_path / "docs"
    root.mkdir()
    write_long_pdf(root / "long.pdf", 2000)
    index.create("home", "all-MiniLM-L6-v2")
    index.add_sources("home", [root])
    control = _ControlAt("pause", at=100)
    seen, result = [], {}
    thread = threading.Thread(target=lambda: result.update(p=Indexer(index, control=control, on_progress=seen.append).run("home")))
    thread.start()
    deadline = time.monotonic() + 60
    while not any(p.paused for p in seen) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(p.paused for p in seen) and thread.is_alive()
    held = control.calls
    time.sleep(0.3)
    assert control.calls == held < 2000  # no page read while paused
    control.resume()
    thread.join(60)
    assert result["p"].phase == "done"
    assert _top(index, "kestrel 2000")[0].page == 2000  # the whole file, read on from where it was paused


def _db_bytes(index) -> int:
    return sum(p.stat().st_size for p in index.path.parent.glob(index.path.name + "*"))


def _big_folder(tmp_path: Path) -> Path:
    big = tmp_path / "big"
    big.mkdir()
    for n in range(4):  # about 8 MB of passages, each word its own keyword
        (big / f"log{n}.txt").write_text("\n\n".join(f"entry {n}-{i} " + f"w{n}x{i} " * 60 for i in range(4000)))
    return big


def test_removing_a_collection_gives_its_space_back_to_the_disk(index, corpus: Path, tmp_path: Path):
    """documents.db kept its size after a collection was removed: a removed 100 MB collection still took 100 MB."""
    from engine.documents import DocumentService

    svc = DocumentService(index, None, watch=False)
    svc.add("home", [corpus])
    svc.add("big", [_big_folder(tmp_path)])
    assert svc.wait("home", 60).phase == "done" and svc.wait("big", 60).phase == "done"
    index.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    before = _db_bytes(index)
    svc.remove("big")
    freed = svc.wait_reclaimed(60)
    after = _db_bytes(index)
    assert after < before / 3 and freed >= before - after
    assert name_of(_top(index, "aphids whitefly")[0]) == "garden.md"  # the other collection is untouched


def test_a_database_made_before_space_was_given_back_is_turned_over_once(index, tmp_path: Path):
    index.create("big", "m")
    index.add_sources("big", [_big_folder(tmp_path)])
    Indexer(index).run("big")
    index.conn.execute("PRAGMA auto_vacuum=NONE")  # as an older Hearth made it
    index.conn.execute("VACUUM")
    before = _db_bytes(index)
    index.delete("big")
    index.reclaim()
    assert _db_bytes(index) < before / 3
    assert index.conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # the next removals go a step at a time
