"""Dataset files as a user writes them: ShareGPT, JSONL and CSV read into prompts, the format
detected, the first N taken, the fingerprint; every malformed case refused naming line and field;
the size limits at the limit and one past it."""

import hashlib
import json

import pytest

from servingctl.loadgen import datasets
from servingctl.loadgen.datasets import DatasetError, detect_format, load_dataset, parse_dataset
from servingctl.schema.results import DatasetSpec


def spec(source="f", **kw):
    return DatasetSpec(source=source, **kw)


def sharegpt(*entries):
    return json.dumps(list(entries), indent=1).encode()


def convo(human, gpt="answer", **extra):
    return {"id": "x", "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}], **extra}


def test_sharegpt_first_turn_as_one_user_message_reference_kept_and_short_entries_skipped_like_vllm():
    data = sharegpt(
        convo("What is 2+2?", "4"),
        {"id": "solo", "conversations": [{"from": "human", "value": "alone"}]},  # fewer than two turns
        {"id": "none"},
        convo("Second", "two words", extra="ignored"),
    )
    ds = parse_dataset(data, spec(num_prompts=None))
    assert [p.messages for p in ds.prompts] == [(("user", "What is 2+2?"),), (("user", "Second"),)]
    assert [p.reference for p in ds.prompts] == ["4", "two words"]
    assert [p.line for p in ds.prompts] == [0, 3]  # entry indexes of the JSON array
    fp = ds.fingerprint
    assert (fp.format, fp.prompts, fp.entries, fp.skipped) == ("sharegpt", 2, 2, 2)
    assert fp.sha256 == hashlib.sha256(data).hexdigest()


def test_jsonl_prompt_or_messages_with_optional_output_tokens_and_timestamp():
    lines = [
        {"prompt": "hello", "output_tokens": 7, "timestamp": 0.5, "id": "ignored"},
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]},
        {"prompt": "third", "timestamp": 2},
    ]
    text = "\n".join(json.dumps(x) for x in lines[:2]) + "\n\n" + json.dumps(lines[2]) + "\n"
    ds = parse_dataset(text.encode(), spec())
    assert [p.messages for p in ds.prompts] == [
        (("user", "hello"),),
        (("system", "be brief"), ("user", "hi")),
        (("user", "third"),),
    ]
    assert [p.output_tokens for p in ds.prompts] == [7, None, None]
    assert [p.timestamp_s for p in ds.prompts] == [0.5, None, 2.0]
    assert [p.line for p in ds.prompts] == [1, 2, 4]  # the blank line 3 is skipped, numbers kept
    assert ds.fingerprint.format == "jsonl"


def test_csv_with_header_quoted_commas_and_messages_as_json():
    text = 'prompt,output_tokens,timestamp,note\n"Hello, world",12,0.0,x\nSecond,,1.5,\n'
    ds = parse_dataset(text.encode(), spec())
    assert [p.messages for p in ds.prompts] == [(("user", "Hello, world"),), (("user", "Second"),)]
    assert [(p.output_tokens, p.timestamp_s, p.line) for p in ds.prompts] == [(12, 0.0, 2), (None, 1.5, 3)]
    msgs = 'messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n'
    assert parse_dataset(msgs.encode(), spec()).prompts[0].messages == (("user", "hi"),)


def test_format_detected_from_content_or_named():
    assert detect_format('\ufeff  [{"conversations": []}]') == "sharegpt"
    assert detect_format('{"prompt": "x"}\n') == "jsonl"
    assert detect_format("prompt\nx\n") == "csv"
    # named: a JSONL-looking text read as CSV on request has no prompt column
    with pytest.raises(DatasetError, match=r"line 1: header: .*needs a prompt or messages column"):
        parse_dataset(b'{"prompt": "x"}\n', spec(format="csv"))


def test_num_prompts_takes_the_first_n_and_the_fingerprint_counts_them():
    text = "".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(5)).encode()
    ds = parse_dataset(text, spec(num_prompts=3))
    assert [p.messages[0][1] for p in ds.prompts] == ["p0", "p1", "p2"]
    assert (ds.fingerprint.prompts, ds.fingerprint.entries) == (3, 5)
    assert parse_dataset(text, spec(num_prompts=50)).fingerprint.prompts == 5  # fewer than asked: all of them


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        (b'{"prompt": "ok"}\n{"prompt": 3}\n', None, r"^line 2: prompt: expected a non-empty string$"),
        (b'{"prompt": "ok"}\n{"prompt": "a", "messages": []}\n', None, r"^line 2: prompt or messages: give exactly one"),
        (b'{"output_tokens": 3}\n', None, r"^line 1: prompt or messages: give exactly one"),
        (b'{"prompt": "ok"}\n{"prompt": "x",\n', None, r"^line 2: not JSON"),
        (b'{"prompt": "x", "output_tokens": 0}\n', None, r"^line 1: output_tokens: 0; expected an integer >= 1$"),
        (b'{"prompt": "x", "output_tokens": 2.5}\n', None, r"^line 1: output_tokens: 2.5"),
        (b'{"prompt": "x", "output_tokens": true}\n', None, r"^line 1: output_tokens: True"),
        (b'{"prompt": "x", "timestamp": -1}\n', None, r"^line 1: timestamp: -1; expected seconds, a number >= 0$"),
        (
            b'{"messages": [{"role": "bot", "content": "x"}]}\n',
            None,
            r"^line 1: messages\[0\]\.role: 'bot'; allowed: system, user, assistant$",
        ),
        (
            b'{"messages": [{"role": "user", "content": ""}]}\n',
            None,
            r"^line 1: messages\[0\]\.content: expected a non-empty string$",
        ),
        (b'{"messages": "hi"}\n', None, r"^line 1: messages: expected a non-empty list"),
        (b'["a"]\n', "jsonl", r"^line 1: expected a JSON object"),
        (b"prompt,output_tokens\nok,3\nbad,many\n", None, r"^line 3: output_tokens: 'many'; expected an integer >= 1$"),
        (b"prompt,timestamp\nok,soon\n", None, r"^line 2: timestamp: 'soon'"),
        (b"prompt\nok\nx,y\n", None, r"^line 3: 2 cells; the header names 1$"),
        (b'messages\n"[not json"\n', None, r"^line 2: messages: not JSON"),
        (b"text,n\nhello,1\n", None, r"^line 1: header: \['text', 'n'\]; needs a prompt or messages column"),
        (
            sharegpt(convo("ok"), {"conversations": [{"value": 3}, {"value": "a"}]}),
            None,
            r"^entry 1: conversations\[0\]\.value: expected a string$",
        ),
        (
            sharegpt(convo("ok"), {"conversations": [{"value": "q"}, {"from": "gpt"}]}),
            None,
            r"^entry 1: conversations\[1\]\.value",
        ),
        (sharegpt(convo("ok"), "oops"), None, r"^entry 1: expected an object with conversations$"),
        (sharegpt({"conversations": "no"}), None, r"^entry 0: conversations: expected a list"),
        (sharegpt(convo("")), None, r"^entry 0: conversations\[0\]\.value: empty prompt$"),
        (b'[{"conversations": [\n', None, r"^line 2: not JSON"),
        (b'{"a": 1}', "sharegpt", r"^line 1: expected a JSON array"),
        (b"prompt\n", None, r"no prompts in the file \(read as csv\)"),
        (b'{"prompt": "x"}\n\xff\xfe\n', None, r"^line 2: not UTF-8 text"),
    ],
)
def test_malformed_files_are_refused_naming_the_line_and_field(data, fmt, message):
    with pytest.raises(DatasetError, match=message):
        parse_dataset(data, spec(format=fmt))


def test_file_size_at_the_limit_is_read_and_one_byte_past_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    body = b'{"prompt": "x"}\n'
    path.write_bytes(body)
    assert len(load_dataset(spec(str(path)), max_bytes=len(body)).prompts) == 1
    reads = []
    monkeypatch.setattr(type(path), "read_bytes", lambda self: reads.append(self) or b"")
    with pytest.raises(DatasetError, match=rf"p.jsonl: {len(body)} bytes; allowed: at most {len(body) - 1}$"):
        load_dataset(spec(str(path)), max_bytes=len(body) - 1)
    assert reads == []
    with pytest.raises(DatasetError, match=r"missing.jsonl: cannot read"):
        load_dataset(spec(str(tmp_path / "missing.jsonl")))


def test_prompt_count_at_the_limit_and_one_past():
    limit = datasets.MAX_PROMPTS
    line = b'{"prompt":"x"}\n'
    assert parse_dataset(line * limit, spec()).fingerprint.prompts == limit
    with pytest.raises(DatasetError, match=rf"{limit + 1} prompts; allowed: at most {limit} \(take fewer with num_prompts\)"):
        parse_dataset(line * (limit + 1), spec())
    assert parse_dataset(line * (limit + 1), spec(num_prompts=limit)).fingerprint.entries == limit + 1
    with pytest.raises(DatasetError, match=rf"^num_prompts: {limit + 1}; allowed: 1..{limit}$"):
        parse_dataset(line, spec(num_prompts=limit + 1))


def test_conversations_from_conversation_id_and_sharegpt_multi_turn_num_prompts_counts_conversations():
    lines = [
        {"prompt": "a1", "conversation_id": "a"},
        {"prompt": "b1", "conversation_id": 7},
        {"prompt": "a2", "conversation_id": "a"},
        {"prompt": "lone"},
        {"prompt": "b2", "conversation_id": 7},
    ]
    data = "\n".join(json.dumps(x) for x in lines).encode()
    grouped = datasets.conversations(parse_dataset(data, spec()).prompts)
    assert [[p.messages[0][1] for p in g] for g in grouped] == [["a1", "a2"], ["b1", "b2"], ["lone"]]
    # the first 2 conversations, every turn of each
    assert [p.messages[0][1] for p in parse_dataset(data, spec(num_prompts=2)).prompts] == ["a1", "b1", "a2", "b2"]
    with pytest.raises(DatasetError, match=r"^line 1: conversation_id: \[1\]; expected a string or an integer$"):
        parse_dataset(b'{"prompt": "x", "conversation_id": [1]}\n', spec())

    entry = {"conversations": [{"value": "q1"}, {"value": "r1"}, {"value": "q2"}, {"value": "r2"}, {"value": "q3"}]}
    first_only = parse_dataset(sharegpt(entry), spec()).prompts
    assert [(p.messages[0][1], p.reference, p.conversation) for p in first_only] == [("q1", "r1", None)]
    turns = parse_dataset(sharegpt(entry), spec(multi_turn=True)).prompts
    # the trailing question without an answer is left out, as vllm's pairs are
    assert [(p.messages[0][1], p.reference, p.conversation) for p in turns] == [("q1", "r1", "0"), ("q2", "r2", "0")]
    with pytest.raises(DatasetError, match=r"^entry 0: conversations\[2\]\.value: empty prompt$"):
        parse_dataset(
            sharegpt({"conversations": [{"value": "q"}, {"value": "r"}, {"value": ""}, {"value": "r"}]}), spec(multi_turn=True)
        )


def test_a_replay_needs_every_timestamp_and_no_conversations():
    ok = parse_dataset(b'{"prompt": "x", "timestamp": 0}\n{"prompt": "y", "timestamp": 1.5}\n', spec())
    datasets.check_replayable(ok)
    with pytest.raises(DatasetError, match=r"^line 2: timestamp: required to replay \(1 prompts have none\)$"):
        datasets.check_replayable(parse_dataset(b'{"prompt": "x", "timestamp": 0}\n{"prompt": "y"}\n', spec()))
    with pytest.raises(DatasetError, match=r"^line 1: conversation_id: a replay sends single requests"):
        datasets.check_replayable(parse_dataset(b'{"prompt": "x", "timestamp": 0, "conversation_id": "c"}\n', spec()))


def test_jsonl_reference_and_to_jsonl_reads_back_as_the_same_requests():
    lines = [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "é q1"}], "reference": "r a"},
        {"prompt": "q2", "output_tokens": 5, "timestamp": 1.25, "conversation_id": 3},
        {"prompt": "q3", "conversation_id": "3", "timestamp": 2},
    ]
    taken = parse_dataset("\n".join(json.dumps(x) for x in lines).encode(), spec()).prompts
    assert taken[0].reference == "r a" and taken[1].reference is None
    again = parse_dataset(datasets.to_jsonl(taken), spec()).prompts
    assert [(p.messages, p.output_tokens, p.reference, p.timestamp_s, p.conversation) for p in again] == [
        (p.messages, p.output_tokens, p.reference, p.timestamp_s, p.conversation) for p in taken
    ]
    with pytest.raises(DatasetError, match=r"^line 1: reference: 3; expected the answer's text$"):
        parse_dataset(b'{"prompt": "x", "reference": 3}\n', spec())
