"""Readers of user corpora: good files parse, every malformed line is named by file:line."""

import pytest

from qkv.data import Pair, read_parallel, read_tsv


def write(path, text: str | bytes):
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def test_read_tsv_good_file(tmp_path):
    path = write(tmp_path / "c.tsv", "Guten Tag.\tGood day.\r\n  Über  \t  Above \nä\tö")
    assert read_tsv(path) == [
        Pair("Guten Tag.", "Good day."),
        Pair("Über", "Above"),
        Pair("ä", "ö"),
    ]


def test_read_tsv_accepts_byte_order_mark(tmp_path):
    path = write(tmp_path / "c.tsv", "\ufeffa\tb\n")
    assert read_tsv(path) == [Pair("a", "b")]


@pytest.mark.parametrize(
    ("text", "line", "found"),
    [
        ("a\tb\nno tab here\n", 2, "0 TABs"),
        ("a\tb\nc\td\te\n", 2, "2 TABs"),
        ("a\tb\n\nc\td\n", 2, "a blank line"),
        ("a\tb\nc\td\n\t x\n", 3, "source side is empty"),
        ("a\t \n", 1, "target side is empty"),
    ],
)
def test_read_tsv_malformed_line_is_named(tmp_path, text, line, found):
    path = write(tmp_path / "bad.tsv", text)
    with pytest.raises(ValueError, match=rf"bad\.tsv:{line}:.*{found}"):
        read_tsv(path)


def test_read_tsv_non_utf8_names_the_line(tmp_path):
    path = write(tmp_path / "latin1.tsv", b"a\tb\n" + "Grüße\tgreetings\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.tsv:2: not valid UTF-8"):
        read_tsv(path)


def test_read_tsv_missing_and_empty(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_tsv(tmp_path / "nope.tsv")
    with pytest.raises(FileNotFoundError, match="directory"):
        read_tsv(tmp_path)
    with pytest.raises(ValueError, match="no lines"):
        read_tsv(write(tmp_path / "empty.tsv", ""))


def test_read_parallel_good_files(tmp_path):
    source = write(tmp_path / "train.de", "Hallo Welt.\nDanke!\n")
    target = write(tmp_path / "train.en", "Hello world.\r\nThanks!")
    assert read_parallel(source, target) == [
        Pair("Hallo Welt.", "Hello world."),
        Pair("Danke!", "Thanks!"),
    ]


def test_read_parallel_counts_differ(tmp_path):
    source = write(tmp_path / "a.de", "1\n2\n3\n")
    target = write(tmp_path / "a.en", "1\n2\n")
    with pytest.raises(ValueError, match=r"a\.de has 3 lines, .*a\.en has 2"):
        read_parallel(source, target)


def test_read_parallel_empty_line_and_missing_file(tmp_path):
    source = write(tmp_path / "a.de", "1\n2\n")
    target = write(tmp_path / "a.en", "1\n   \n")
    with pytest.raises(ValueError, match=r"a\.en:2: empty line"):
        read_parallel(source, target)
    with pytest.raises(FileNotFoundError, match="missing.en"):
        read_parallel(source, tmp_path / "missing.en")


def test_the_errors_are_qkvs_own_kinds(tmp_path):
    from qkv.errors import DataError, MissingFileError

    with pytest.raises(MissingFileError):
        read_tsv(tmp_path / "absent.tsv")
    with pytest.raises(DataError, match="holds no lines"):
        read_tsv(write(tmp_path / "empty.tsv", ""))


def test_a_binary_file_is_named_as_such(tmp_path):
    from qkv.errors import DataError

    # valid UTF-8 but NUL bytes: a binary file (an archive, a tensor dump) given by mistake
    path = write(tmp_path / "x.tsv", b"a\tb\n\x00\x00\x01\x02\tx\n")
    with pytest.raises(DataError, match=r"x.tsv:2: a NUL byte: this looks like a binary file"):
        read_tsv(path)


def test_a_corpus_too_large_for_memory_is_refused_before_reading(tmp_path, monkeypatch):
    import qkv.data.readers as readers
    from qkv.errors import DataError

    path = write(tmp_path / "big.tsv", "a\tb\n" * 100)
    monkeypatch.setattr(readers, "MAX_CORPUS_BYTES", 399)
    monkeypatch.setattr(readers, "open", lambda *a, **k: pytest.fail("read anyway"), raising=False)
    with pytest.raises(DataError, match="big.tsv holds 400 bytes, over the 399 that qkv reads"):
        read_tsv(path)
