"""SSE parsing: events split across reads, CRLF, multi-line data, comments, malformed lines."""

from servingctl.loadgen.sse import SSEEvent, SSEParser


def feed_all(parser: SSEParser, *chunks: bytes) -> list[SSEEvent]:
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    return events + parser.close()


def test_events_split_anywhere_across_reads():
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.feed(b": 1}\n") == []  # line complete, event not yet dispatched
    assert parser.feed(b"\ndata: [DONE]\n\n") == [SSEEvent('{"a": 1}'), SSEEvent("[DONE]")]
    assert parser.malformed_lines == 0


def test_crlf_and_cr_line_endings_even_when_the_pair_straddles_reads():
    parser = SSEParser()
    events = feed_all(parser, b"data: one\r", b"\n\r", b"\ndata: two\r\r")
    assert events == [SSEEvent("one"), SSEEvent("two")]


def test_multi_line_data_is_joined_with_newlines_and_event_type_kept():
    events = feed_all(SSEParser(), b"event: update\ndata: first\ndata:second\ndata\n\n")
    assert events == [SSEEvent("first\nsecond\n", event="update")]


def test_comments_and_id_retry_fields_are_not_events_nor_malformed():
    parser = SSEParser()
    events = feed_all(parser, b": keep-alive\n\nid: 7\nretry: 100\ndata: x\n\n")
    assert events == [SSEEvent("x")]
    assert parser.malformed_lines == 0


def test_malformed_lines_are_counted_and_skipped():
    parser = SSEParser()
    events = feed_all(parser, b'data: ok\nthis is not sse\n{"raw": 1}\n\ndata: next\n\n')
    assert events == [SSEEvent("ok"), SSEEvent("next")]
    assert parser.malformed_lines == 2


def test_unterminated_last_event_is_dispatched_at_close():
    parser = SSEParser()
    assert parser.feed(b"data: tail") == []
    assert parser.close() == [SSEEvent("tail")]


def test_blank_lines_without_data_dispatch_nothing():
    assert feed_all(SSEParser(), b"\n\n\n") == []
