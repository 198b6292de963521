"""Runs of varying prompts against a fake OpenAI server with /tokenize: a dataset's prompts sent as
written with their own output lengths and checked one by one, its fingerprint with the run and in
the report; lengths drawn from distributions met per request; a malformed file refused before
anything is sent."""

import asyncio
import hashlib
import json
from itertools import pairwise

import httpx
import pytest

from servingctl.loadgen.calibration import UNIT
from servingctl.loadgen.lengths import parse_distribution
from servingctl.loadgen.outputs.markdown import bench_command
from servingctl.loadgen.outputs.terminal import print_run
from servingctl.loadgen.runner import run_benchmark
from servingctl.schema.results import DatasetSpec, RunConfig
from servingctl_cli.main import main


def words(text: str) -> int:
    return len(text.split())


def fake_server(lie_about: str | None = None):
    """Tokens: a chat prompt is 3 + its words (+1 when it contains `lie_about`, which /tokenize does
    not count); a plain prompt is 1 + its words; streams max_tokens one-token chunks."""
    sent: list[dict] = []

    def prompt_tokens(messages, served: bool) -> int:
        count = 3 + sum(words(m["content"]) for m in messages)
        return count + 1 if served and lie_about and any(lie_about in m["content"] for m in messages) else count

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path == "/tokenize":
            if "messages" in body:
                return httpx.Response(200, json={"count": prompt_tokens(body["messages"], served=False)})
            return httpx.Response(200, json={"count": 1 + words(body["prompt"])})
        completions = request.url.path == "/v1/completions"
        if request.url.path != "/v1/chat/completions" and not completions:
            return httpx.Response(404, json={"error": "not found"})
        sent.append(body | {"path": request.url.path})
        n = body["max_tokens"]
        prompt = 1 + words(body["prompt"]) if completions else prompt_tokens(body["messages"], served=True)
        piece = {"text": "x"} if completions else {"delta": {"content": "x"}}
        events = [{"choices": [piece | {"finish_reason": "length" if i == n - 1 else None}]} for i in range(n)]
        events += [{"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": n}}]
        lines = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]

        async def stream():
            for line in lines:
                yield line

        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler), sent


def config(**kw) -> RunConfig:
    return RunConfig(**{"endpoint": "http://fake:8000", "model": "m", "concurrencies": [2], "warmup": 0, "max_tokens": 4, **kw})


def test_sharegpt_dataset_sends_each_first_turn_with_its_reference_length_and_checks_each(tmp_path, capsys):
    entries = [
        {
            "conversations": [
                {"from": "human", "value": f"question number {i}"},
                {"from": "gpt", "value": " ".join(["w"] * (i + 2))},
            ]
        }
        for i in range(5)
    ]
    entries[3]["conversations"][0]["value"] = "a liar question"
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries))
    transport, sent = fake_server(lie_about="liar")
    spec = DatasetSpec(source=str(path), num_prompts=4, output_tokens="dataset")
    run = asyncio.run(run_benchmark(config(mode="sustained", dataset=spec), transport=transport, run_id="r1"))

    assert [s.summary.name for s in run.scenarios] == ["dataset-c2-sustained"]
    scenario = run.scenarios[0]
    # every prompt once, as one user message, its output length the reference answer's tokens (1 + words)
    assert sorted(b["messages"][0]["content"] for b in sent) == sorted(
        ["question number 0", "question number 1", "question number 2", "a liar question"]
    )
    assert all(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in sent)
    by_index = sorted(scenario.records, key=lambda r: r.index)
    assert [r.completion_tokens for r in by_index] == [3, 4, 5, 6]
    # the server counted one token more for the liar than /tokenize did: that request, and only it, is flagged
    assert [r.mismatches for r in by_index] == [[], [], [], ["prompt_tokens"]]
    assert scenario.summary.mismatches.prompt_tokens == 1
    fp = run.dataset
    assert fp is not None and fp.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (fp.format, fp.prompts, fp.entries, fp.output_tokens) == ("sharegpt", 4, 5, "dataset")
    assert run.calibrations[0].method == "dataset"
    print_run(run)
    out = capsys.readouterr().out
    assert f"prompts: dataset {path} (sharegpt, sha256 {fp.sha256}): first 4 of 5 prompts" in out
    assert f"--dataset {path} --num-prompts 4 --dataset-output-tokens dataset".replace(" --", " \\\n  --") in bench_command(run)


def test_jsonl_chat_messages_cycled_in_burst_rounds_and_output_tokens_from_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}], "output_tokens": 2},
        {"prompt": "second prompt", "output_tokens": 5},
        {"prompt": "third"},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    transport, sent = fake_server()
    spec = DatasetSpec(source=str(path), output_tokens="dataset")
    run = asyncio.run(run_benchmark(config(dataset=spec, rounds=2), transport=transport, run_id="r2"))
    records = sorted(run.scenarios[0].records, key=lambda r: r.index)
    assert len(records) == 4  # 2 rounds of 2: the 3 prompts cycled
    first = next(b for b in sent if b["cache_salt"].endswith("-0"))
    assert first["messages"] == lines[0]["messages"]  # sent as written, the system message too
    # output_tokens from each line; the third has none: max_tokens
    assert [r.completion_tokens for r in records] == [2, 5, 4, 2]
    assert all(not r.mismatches and r.prompt_tokens is not None for r in records)
    assert len({b["cache_salt"] for b in sent}) == 4  # one salt a request: the repeat hits no cache


def test_distributions_draw_lengths_per_request_each_checked_exactly():
    # the fake counts a synthetic prompt as 3 + 7 words per unit sentence
    transport, sent = fake_server()
    run = asyncio.run(
        run_benchmark(
            config(
                mode="sustained",
                requests=40,
                input_distribution=parse_distribution("uniform:20:200"),
                output_distribution=parse_distribution("normal:8:3"),
            ),
            transport=transport,
            run_id="r3",
        )
    )
    scenario = run.scenarios[0]
    assert scenario.summary.name == "in20-200-c2-sustained"
    assert len(scenario.records) == 40 and all(r.ok and not r.mismatches for r in scenario.records)
    per_unit = words(UNIT)
    prompt_lengths = {r.prompt_tokens for r in scenario.records}
    assert len(prompt_lengths) > 5 and all(20 - per_unit < n <= 200 for n in prompt_lengths)
    outputs = [b["max_tokens"] for b in sent]
    assert len(set(outputs)) > 3 and min(outputs) >= 1
    assert sorted(r.completion_tokens for r in scenario.records) == sorted(outputs)


def test_output_distribution_alone_keeps_the_calibrated_prompts():
    transport, sent = fake_server()
    run = asyncio.run(
        run_benchmark(
            config(input_tokens=[50], rounds=3, output_distribution=parse_distribution("uniform:1:9")),
            transport=transport,
            run_id="r4",
        )
    )
    assert run.calibrations[0].method == "tokenize" and run.scenarios[0].summary.name == "in50-c2"
    assert len({b["messages"][0]["content"] for b in sent}) == 1
    assert all(not r.mismatches for r in run.scenarios[0].records)
    assert len({b["max_tokens"] for b in sent}) > 1


def test_cli_refuses_a_malformed_dataset_naming_line_and_field_before_contacting_the_server(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": "ok", "output_tokens": -3}\n')
    # nothing listens on port 9: had anything been sent, the error would be that the endpoint is unreachable (exit 1)
    code = main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--dataset", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--dataset {path}: line 2: output_tokens: -3; expected an integer >= 1 (nothing was sent)" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-prompts", "3"], "--multi-turn, --think-time, --replay: only with --dataset FILE"),
        (["--think-time", "2"], "--multi-turn, --think-time, --replay: only with --dataset FILE"),
        (["--input-dist", "triangle:1:2"], "kind 'triangle'; allowed: fixed, uniform, normal"),
        (["--dataset", "x.json", "--salt-mode", "prompt-nonce"], "--salt-mode: prompt-nonce changes the prompts' lengths"),
        (
            ["--dataset", "x.json", "--dataset-format", "parquet"],
            "--dataset-format: invalid choice: 'parquet' (choose from 'sharegpt', 'jsonl', 'csv')",
        ),
    ],
)
def test_cli_flag_errors_name_the_flag_and_allowed_values(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_conversations_carry_the_servers_replies_and_share_one_salt_per_conversation(tmp_path):
    path = tmp_path / "talks.jsonl"
    lines = [
        {"prompt": "hello there", "conversation_id": "a", "output_tokens": 2},
        {"prompt": "first of b", "conversation_id": "b", "output_tokens": 3},
        {"prompt": "and then", "conversation_id": "a", "output_tokens": 2},
        {"prompt": "a last word", "conversation_id": "a", "output_tokens": 1},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    transport, sent = fake_server()
    spec = DatasetSpec(source=str(path), output_tokens="dataset")
    run = asyncio.run(run_benchmark(config(mode="sustained", dataset=spec, think_time_s=0.05), transport=transport, run_id="r5"))
    scenario = run.scenarios[0]
    assert scenario.summary.name == "conversations-c2-sustained" and scenario.summary.ok == 4
    a = [b for b in sent if b["messages"][0]["content"] == "hello there"]
    # the third turn of a carries both earlier turns and the server's own replies ("x" per token)
    assert [b["messages"] for b in a][-1] == [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "xx"},
        {"role": "user", "content": "and then"},
        {"role": "assistant", "content": "xx"},
        {"role": "user", "content": "a last word"},
    ]
    assert len({b["cache_salt"] for b in a}) == 1  # one salt per conversation: its prefix is meant to be reused
    b_salts = {b["cache_salt"] for b in sent if b["messages"][0]["content"] == "first of b"}
    assert len(b_salts) == 1 and b_salts.isdisjoint({a[0]["cache_salt"]})
    # later turns' prompt tokens are not known in advance (the replies are generated): only the first is checked
    assert all(not r.mismatches for r in scenario.records)
    turns_of_a = sorted((r for r in scenario.records if r.completion_tokens != 3), key=lambda r: r.t_start_ns)  # b's is 3
    assert [r.completion_tokens for r in turns_of_a] == [2, 2, 1]
    for before, after in pairwise(turns_of_a):
        assert after.t_start_ns - before.t_end_ns >= 0.05e9  # the think time between a reply and the next turn


def test_replay_sends_a_trace_in_timestamp_order_at_its_offsets(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,prompt\n0.6,third\n0.0,first\n0.2,second\n")
    transport, sent = fake_server()
    spec = DatasetSpec(source=str(path))
    run = asyncio.run(
        run_benchmark(
            config(mode="sustained", dataset=spec, replay_speed=2.0, concurrencies=[8]), transport=transport, run_id="r6"
        )
    )
    scenario = run.scenarios[0]
    assert scenario.summary.name == "dataset-c8-replay2"
    assert [b["messages"][0]["content"] for b in sent] == ["first", "second", "third"]
    starts = [r.t_start_ns / 1e9 for r in sorted(scenario.records, key=lambda r: r.index)]
    lateness = [start - starts[0] - offset for start, offset in zip(starts, [0.0, 0.1, 0.3], strict=True)]
    assert all(0 <= late < 0.05 for late in lateness), lateness
    with pytest.raises(Exception, match=r"line 2: timestamp: required to replay"):
        path.write_text("timestamp,prompt\n,first\n")
        asyncio.run(run_benchmark(config(mode="sustained", dataset=spec, replay_speed=1.0), transport=transport, run_id="r7"))


def test_rate_sweep_runs_one_scenario_per_rate_with_constant_arrivals(capsys):
    transport, _ = fake_server()
    cfg = config(input_tokens=[50], concurrencies=[4], mode="rate", rates=[20.0, 40.0], arrivals="constant", requests=4)
    run = asyncio.run(run_benchmark(cfg, transport=transport, run_id="r8"))
    assert [s.summary.name for s in run.scenarios] == ["in50-c4-rate20", "in50-c4-rate40"]
    assert [s.summary.rate for s in run.scenarios] == [20.0, 40.0]
    for scenario, gap in zip(run.scenarios, (0.05, 0.025), strict=True):
        starts = sorted(r.t_start_ns / 1e9 for r in scenario.records)
        # sent at k / rate after the first (an absolute schedule: a late send does not shift the next)
        lateness = [start - starts[0] - k * gap for k, start in enumerate(starts)]
        assert len(starts) == 4 and all(-0.005 < late < 0.03 for late in lateness), starts
    assert "--rate 20,40 \\\n  --arrivals constant" in bench_command(run)
    with pytest.raises(SystemExit):
        main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--mode", "burst", "--rate", "1,2"])
    assert "--rate: a sweep of arrival rates above 0 in mode rate; got [1.0, 2.0] in mode burst" in capsys.readouterr().err


def test_rate_list_flag_refuses_a_bad_value_naming_it(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--mode", "rate", "--request-rate", "1,x"])
    assert "argument --rate/--request-rate: 'x': expected comma-separated positive numbers" in capsys.readouterr().err


def test_completions_api_sends_prompts_without_a_chat_template_and_checks_them(tmp_path):
    transport, sent = fake_server()
    run = asyncio.run(run_benchmark(config(api="completions", input_tokens=[40], rounds=1), transport=transport, run_id="r9"))
    assert {b["path"] for b in sent} == {"/v1/completions"} and all("messages" not in b for b in sent)
    calibration = run.calibrations[0]
    # counted as a plain prompt (1 + words here), not through the chat template (3 + words)
    assert calibration.actual_tokens == 1 + words(sent[0]["prompt"]) and calibration.actual_tokens <= 40
    assert all(r.ok and not r.mismatches and r.completion_tokens == 4 for r in run.scenarios[0].records)

    path = tmp_path / "p.csv"
    path.write_text("prompt,output_tokens\nhello world,3\n")
    spec = DatasetSpec(source=str(path), output_tokens="dataset")
    run = asyncio.run(run_benchmark(config(api="completions", dataset=spec, mode="sustained"), transport=transport, run_id="r10"))
    assert sent[-1]["prompt"] == "hello world" and not run.scenarios[0].records[0].mismatches
    path.write_text('messages\n"[{""role"": ""system"", ""content"": ""s""}, {""role"": ""user"", ""content"": ""u""}]"\n')
    with pytest.raises(Exception, match=r"line 2: messages: /v1/completions sends one prompt; this line has 2 messages"):
        asyncio.run(run_benchmark(config(api="completions", dataset=spec, mode="sustained"), transport=transport, run_id="r11"))


def test_a_jsonl_reference_gives_the_output_length_unless_the_line_names_output_tokens(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [{"prompt": "one", "reference": "a b c d"}, {"prompt": "two", "reference": "a b c d", "output_tokens": 2}]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    transport, sent = fake_server()
    spec = DatasetSpec(source=str(path), output_tokens="dataset")
    run = asyncio.run(run_benchmark(config(mode="sustained", dataset=spec), transport=transport, run_id="r3"))
    by_prompt = {b["messages"][0]["content"]: b["max_tokens"] for b in sent}
    # the reference's tokens as /tokenize counts a bare prompt (1 + its words here), the line's own output_tokens first
    assert by_prompt == {"one": 5, "two": 2} and run.scenarios[0].summary.ok == 2
