from engine.backends.base import StopMatcher, Utf8Decoder


def feed_all(matcher, pieces):
    out, hit = [], False
    for p in pieces:
        text, hit = matcher.feed(p)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(matcher.flush())
    return "".join(out), hit


def test_stop_string_split_across_pieces_never_leaks():
    m = StopMatcher(["</end>"])
    emitted = []
    for piece in ["Hello ", "wor", "ld</", "en", "d> more"]:
        text, hit = m.feed(piece)
        emitted.append(text)
        assert "</" not in "".join(emitted)
        if hit:
            break
    assert "".join(emitted) == "Hello world"
    assert hit


def test_partial_match_that_does_not_complete_is_released():
    assert feed_all(StopMatcher(["STOP"]), ["abc ST", "OP"]) == ("abc ", True)
    assert feed_all(StopMatcher(["STOP"]), ["abc ST", "ar"]) == ("abc STar", False)
    assert feed_all(StopMatcher(["STOP"]), ["abc S"]) == ("abc S", False)


def test_earliest_of_several_stop_strings_wins():
    assert feed_all(StopMatcher(["yy", "x"]), ["aaxbyy"]) == ("aa", True)


def test_utf8_decoder_holds_incomplete_characters():
    d = Utf8Decoder()
    data = "héllo 🌍".encode()
    out = "".join(d.feed(data[i : i + 1]) for i in range(len(data))) + d.flush()
    assert out == "héllo 🌍"


def test_a_stray_byte_is_replaced_at_once_and_holds_back_nothing_after_it():
    d = Utf8Decoder()
    assert [d.feed(p) for p in (b"a", b"\xc3", b"Collection", b" Arr")] == ["a", "", "\ufffdCollection", " Arr"]
    assert d.feed(b"\xf0\x9f") == "" and d.feed(b"\x8c\x8d") == "\U0001f30d" and d.flush() == ""
    assert d.feed(b"\xe2\x82") == "" and d.flush() == "\ufffd"
