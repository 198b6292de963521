"""Engine core: max-num-seqs queueing, chunked prefill, MTP chunks of 1 or 2 tokens, counters."""

import random

from servingctl_twin.simserver import TimingModel
from servingctl_twin.simserver.prefix_cache import PrefixCache
from servingctl_twin.simserver.scheduler import Scheduler, Seq


def _sched(max_num_seqs=4, budget=2048, mtp=1):
    return Scheduler(TimingModel(), max_num_seqs, budget, mtp, 0.66, PrefixCache())


def _seq(prompt=254, target=256, seed=0):
    return Seq(prompt, target, "length", [], random.Random(seed))


def _drain(sched):
    per_seq, steps = {}, []
    while (step := sched.plan_step()) is not None:
        steps.append(step)
        for seq, new in sched.commit(step):
            per_seq.setdefault(id(seq), []).append(new)
    return per_seq, steps


def test_max_num_seqs_keeps_the_rest_waiting():
    sched = _sched(max_num_seqs=2)
    for i in range(5):
        sched.add(_seq(seed=i))
    step = sched.plan_step()
    assert len(sched.running) == 2 and len(sched.waiting) == 3
    assert [chunk for _, chunk in step.prefills] == [254, 254]


def test_long_prompt_is_prefilled_in_budget_sized_chunks():
    sched = _sched(budget=2048)
    sched.add(_seq(prompt=5000, target=1))
    chunks = []
    while (step := sched.plan_step()) is not None:
        chunks += [chunk for _, chunk in step.prefills]
        sched.commit(step)
    assert chunks == [2048, 2048, 904]


def test_mtp_steps_yield_one_or_two_tokens_and_counters_add_up():
    sched = _sched()
    seqs = [_seq(seed=i) for i in range(3)]
    for seq in seqs:
        sched.add(seq)
    per_seq, _ = _drain(sched)
    for tokens in per_seq.values():
        assert sum(tokens) == 256
        assert set(tokens[1:-1]) == {1, 2}  # first token from prefill; last may be clipped
    c = sched.counters
    assert c.generation_tokens == 3 * 256
    assert c.prompt_tokens == 3 * 254
    assert c.success["length"] == 3
    assert c.num_draft_tokens == c.num_drafts
    assert 0.55 < c.num_accepted_tokens / c.num_drafts < 0.77


def test_without_mtp_every_step_yields_one_token():
    sched = _sched(mtp=0)
    sched.add(_seq(target=20))
    per_seq, steps = _drain(sched)
    assert list(per_seq.values()) == [[1] * 20]
    assert len(steps) == 20


def test_prefix_hit_shortens_prefill():
    cache = PrefixCache()
    sched = Scheduler(TimingModel(), 4, 2048, 0, 0.66, cache)
    tokens = list(range(1000))
    first = Seq(1000, 1, "length", cache.block_hashes(tokens, None), random.Random(0))
    sched.add(first)
    cold = sched.plan_step()
    sched.commit(cold)
    again = Seq(1000, 1, "length", cache.block_hashes(tokens, None), random.Random(0))
    sched.add(again)
    warm = sched.plan_step()
    assert [chunk for _, chunk in warm.prefills] == [1000 - 992]
    assert warm.duration_ms < cold.duration_ms


def test_abort_frees_the_slot_and_counts_abort():
    sched = _sched(max_num_seqs=1)
    a, b = _seq(), _seq()
    sched.add(a)
    sched.add(b)
    sched.commit(sched.plan_step())
    sched.abort(a)
    assert sched.counters.success["abort"] == 1
    sched.plan_step()
    assert sched.running == [b]
