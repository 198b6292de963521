"""The simulator over real HTTP: vLLM's stream shape, counts that add up, metrics, errors, info routes."""

import time
from itertools import pairwise

import pytest


def test_stream_shape_matches_vllm(api):
    result = api.stream(api.body(max_tokens=64))
    chunks = result.content_chunks
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["usage"]["completion_tokens"] == 0
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == api.MODEL for c in result.events)
    assert len({c["id"] for c in result.events}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    usage_chunk = result.events[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 64
    assert result.done and not result.bad_lines


def test_continuous_usage_adds_up_and_chunks_carry_one_or_two_tokens(api):
    result = api.stream(api.body(max_tokens=256))
    cumulative = [c["usage"]["completion_tokens"] for c in result.content_chunks]
    per_chunk = [b - a for a, b in pairwise(cumulative)]
    assert cumulative[-1] == 256 == sum(per_chunk)
    assert len(result.content_chunks) - 1 < 256  # MTP: fewer content chunks than tokens
    assert 1 in per_chunk and 2 in per_chunk
    assert all(
        c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in result.content_chunks
    )


def test_no_usage_without_stream_options(api):
    body = api.body()
    del body["stream_options"]
    result = api.stream(body)
    assert all("usage" not in c for c in result.events)
    assert result.events[-1]["choices"][0]["finish_reason"] == "length"


def test_include_usage_without_continuous_stats_sends_only_the_final_usage(api):
    result = api.stream(api.body(stream_options={"include_usage": True}))
    assert [("usage" in c) for c in result.events] == [False] * (len(result.events) - 1) + [True]


def test_tokenize_counts_what_the_chat_request_reports(api):
    content = "This is deterministic benchmark input text. " * 36
    messages = [{"role": "user", "content": content}]
    tokenized = api.post("/tokenize", json={"model": api.MODEL, "messages": messages, "add_generation_prompt": True}).json()
    result = api.stream(api.body(content))
    assert tokenized["count"] == result.events[-1]["usage"]["prompt_tokens"] == len(tokenized["tokens"])
    assert tokenized["max_model_len"] == 16384
    prompt_only = api.post("/tokenize", json={"prompt": content}).json()
    assert prompt_only["count"] < tokenized["count"]  # no chat template, only BOS


def test_metrics_deltas_equal_tokens_served(api):
    before = api.scrape()
    usages = [api.stream(api.body(f"question {i}", max_tokens=40 + i, cache_salt=f"s{i}")).events[-1]["usage"] for i in range(3)]
    after = api.scrape()

    def delta(name, **labels):
        return api.metric(after, name, **labels) - api.metric(before, name, **labels)

    assert delta("vllm:generation_tokens_total") == sum(u["completion_tokens"] for u in usages) == 40 + 41 + 42
    assert delta("vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for u in usages)
    assert delta("vllm:request_success_total", finished_reason="length") == 3
    drafts = delta("vllm:spec_decode_num_drafts_total")
    assert drafts > 0
    assert 0 < delta("vllm:spec_decode_num_accepted_tokens_total") < drafts
    assert api.metric(after, "vllm:num_requests_running") == 0
    assert api.metric(after, "vllm:num_requests_waiting") == 0


def test_metrics_exposition_uses_vllm_names_and_labels(api):
    text = api.get("/metrics").text
    for name in (
        "generation_tokens",
        "prompt_tokens",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens",
        "request_success",
    ):
        assert f"# TYPE vllm:{name}_total counter" in text
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert f'vllm:generation_tokens_total{{engine="0",model_name="{api.MODEL}"}}' in text


def test_non_streaming_completion(api):
    body = api.body(max_tokens=50)
    del body["stream_options"]
    body["stream"] = False
    answer = api.post("/v1/chat/completions", json=body).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] == 50
    assert answer["choices"][0]["message"]["content"]


def test_same_seed_same_text_and_early_stop_without_ignore_eos(api):
    def run(seed):
        result = api.stream(api.body(max_tokens=200, ignore_eos=False, seed=seed))
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in result.content_chunks)
        return text, result.content_chunks[-1]["choices"][0]["finish_reason"], result.events[-1]["usage"]

    assert run(3) == run(3)
    outcomes = [run(seed) for seed in range(12)]
    stopped = [usage["completion_tokens"] for _, reason, usage in outcomes if reason == "stop"]
    assert stopped and all(n < 200 for n in stopped)
    assert all(usage["completion_tokens"] == 200 for _, reason, usage in outcomes if reason == "length")


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"model": "gpt-9"}, 404, "model"),
        ({"max_tokens": 0}, 400, "max_tokens"),
        ({"max_tokens": 20000}, 400, "max_tokens"),
        ({"max_completion_tokens": 20000, "max_tokens": None}, 400, "max_completion_tokens"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
        ({"temperature": -1}, 400, "temperature"),
        ({"stream": False}, 400, "stream_options"),
    ],
)
def test_bad_requests_name_the_field(api, change, status, param):
    response = api.post("/v1/chat/completions", json=api.body(**change))
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == status and param.split(".")[0] in error["message"]


def test_invalid_json_and_unknown_route(api):
    response = api.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["param"] == "body"
    assert api.get("/v1/nothing").status_code == 404
    assert api.get("/v1/chat/completions").status_code == 405


def test_info_routes_say_simulator(api):
    assert api.get("/health").status_code == 200
    version = api.get("/version").json()
    assert version["simulator"] is True and version["version"].startswith("servingctl-simulator")
    models = api.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == [api.MODEL]


def test_client_disconnect_aborts_the_request(api):
    before = api.scrape()
    with api.client.stream("POST", f"{api.url}/v1/chat/completions", json=api.body(max_tokens=5000)) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"role"' not in line:
                break
    for _ in range(200):  # the abort is asynchronous: wait for the server to notice
        after = api.scrape()
        if api.metric(after, "vllm:request_success_total", finished_reason="abort") > api.metric(
            before, "vllm:request_success_total", finished_reason="abort"
        ):
            break
        time.sleep(0.01)
    assert (
        api.metric(after, "vllm:request_success_total", finished_reason="abort")
        == api.metric(before, "vllm:request_success_total", finished_reason="abort") + 1
    )
    assert api.metric(after, "vllm:num_requests_running") == 0
