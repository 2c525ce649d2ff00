"""Offline tokenizers for the tiny models.

Real checkpoints ship their own tokenizer; the tiny models need one that is built without the
hub. A byte-level BPE with no merges covers every UTF-8 string, so any prompt tokenizes, and it
saves and loads with `save_pretrained` / `from_pretrained` like a real one.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

_BYTE_LEVEL = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

# A Qwen-style chat template: the Cosmos 2.5 pipeline tokenizes prompts through apply_chat_template.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_vocab(specials: list[str]) -> dict[str, int]:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    return vocab


def _byte_bpe(specials: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=_byte_vocab(specials), merges=[]))
    tok.pre_tokenizer = _BYTE_LEVEL
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def build_qwen_tokenizer():
    """A Qwen2-style fast tokenizer over bytes (262 ids), with the chat template the pipeline uses."""
    from transformers import Qwen2TokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=_byte_bpe(specials), eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, bos_token=None,
    )
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def build_t5_tokenizer():
    """A T5-style Unigram tokenizer over single characters: pad=0, eos=1, unk=2, as T5 expects.

    Printable ASCII and the sentencepiece word marker are in the vocabulary; other characters
    map to <unk>, which is what a real T5 vocabulary does with rare symbols too.
    """
    from transformers import T5TokenizerFast

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(chr(c), -3.0) for c in range(33, 127)]
    return T5TokenizerFast(vocab=vocab, extra_ids=0)
