"""Tokenizer and chat template: deterministic counts, a fixed template overhead, empty-text tokens."""

from servingctl_twin.simserver import tokenizer


def test_words_and_punctuation_are_tokens():
    assert len(tokenizer.encode("This is deterministic benchmark input text. ")) == 7
    assert tokenizer.encode("Hello, world!") == tokenizer.encode("Hello ,  world !")


def test_chat_template_overhead_is_bos_plus_two_per_message_plus_generation_prompt():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there."}]
    content = len(tokenizer.encode("Be brief.")) + len(tokenizer.encode("Hi there."))
    assert len(tokenizer.apply_chat_template(messages, add_generation_prompt=False)) == content + 1 + 2 * 2
    assert len(tokenizer.apply_chat_template(messages, add_generation_prompt=True)) == content + 1 + 2 * 2 + 1


def test_reference_prompt_repetitions_grow_by_seven_tokens():
    unit = "This is deterministic benchmark input text. "
    counts = [len(tokenizer.apply_chat_template([{"role": "user", "content": unit * n}], True)) for n in (1, 2, 3)]
    assert counts[1] - counts[0] == counts[2] - counts[1] == 7


def test_prompt_gets_bos_unless_special_tokens_are_off():
    assert tokenizer.encode_prompt("a b")[0] == tokenizer.BOS
    assert len(tokenizer.encode_prompt("a b", add_special_tokens=False)) == 2


def test_generated_text_is_deterministic_and_some_tokens_have_no_text():
    assert tokenizer.generated_text(5, 0, 50) == tokenizer.generated_text(5, 0, 50)
    pieces = [tokenizer.generated_text(0, i, 1) for i in range(2000)]
    assert "".join(pieces) == tokenizer.generated_text(0, 0, 2000)
    empty = pieces.count("")
    assert 0 < empty < 200  # about 4 %: a stream has somewhat fewer chunks than tokens
