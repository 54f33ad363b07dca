"""A small byte-level BPE tokenizer built locally, with no download and no training randomness.

The merges are learnt by a plain greedy BPE over a fixed in-code corpus, ties broken by the pair itself,
so every process on every machine builds the same vocabulary. Byte-level means any text encodes (no
unknown token). The layout is fixed:

* ids 0-15: special tokens (pad, bos, eos, chat markers, reserved ids that multimodal configs can point
  their image/audio/video placeholder ids at);
* ids 16-271: the 256 byte symbols;
* ids 272-511: learnt merges.
"""

from __future__ import annotations

import collections
import functools
import json

VOCAB_SIZE = 512

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|startoftext|>"
EOS_TOKEN = "<|im_end|>"
IM_START_TOKEN = "<|im_start|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"
NAMED_SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, IM_START_TOKEN, ENDOFTEXT_TOKEN]
NUM_SPECIAL_TOKENS = 16
RESERVED_TOKENS = [f"<|reserved_{i}|>" for i in range(NUM_SPECIAL_TOKENS - len(NAMED_SPECIAL_TOKENS))]
SPECIAL_TOKENS = NAMED_SPECIAL_TOKENS + RESERVED_TOKENS

PAD_TOKEN_ID = 0
BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2
# Ids a tiny config may use for image/audio/video placeholders and similar markers.
RESERVED_TOKEN_IDS = list(range(len(NAMED_SPECIAL_TOKENS), NUM_SPECIAL_TOKENS))

# ChatML-style turns; `{% generation %}` marks assistant text so `return_assistant_tokens_mask=True`
# (TRL's assistant_only_loss) works. Content may be a string or a list of {"type": "text", ...} parts.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}{%- set content = message['content'] -%}"
    "{%- elif message['content'] is none -%}{%- set content = '' -%}"
    "{%- else -%}{%- set content = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') -%}{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{% generation %}{{- content + '<|im_end|>' -}}{% endgeneration %}{{- '\\n' -}}"
    "{%- else -%}{{- content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Fixed training text for the merges. Changing it changes every tiny model's vocabulary: don't.
_CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model is a fast model, and a fast test is a test
that people run. We train on Trainium and we check the results against the CPU, token by token.
Hello, world! How are you today? I am fine, thank you. What is the capital of France? It is Paris.
The cat sat on the mat. The dog ran in the park. She said that the weather would be warm and sunny.
Once upon a time there was a little robot who wanted to learn how to write poems about the sea.
In the morning the sun rises in the east, and in the evening it sets in the west.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 512 1024 2048 3.14 2.71 1e-5 0.5 99%.
def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))

import torch
x = torch.ones(2, 3)
y = x @ x.T
if y.sum() > 0:
    print("positive")
class Model(nn.Module):
    def forward(self, input_ids, attention_mask=None):
        return self.lm_head(self.model(input_ids))
<html><body><p>This is a paragraph.</p></body></html>
{"name": "tiny", "value": 3, "items": [1, 2, 3], "ok": true}
User: Can you help me write an email to my team about the meeting on Monday?
Assistant: Of course. Here is a short draft: Hi team, the meeting is moved to Monday at ten.
Question: If there are three apples and you take away two, how many do you have? Answer: two.
Translate to German: good morning -> guten Morgen. Translate to French: thank you -> merci.
Caf\u00e9, na\u00efve, r\u00e9sum\u00e9, \u00fcber, stra\u00dfe, \u00e0 bient\u00f4t, \u00bfqu\u00e9 tal?
\u4f60\u597d\uff0c\u4e16\u754c\u3002\u3053\u3093\u306b\u3061\u306f\u3002\uc548\ub155\ud558\uc138\uc694. \U0001f600 \U0001f680
The model generates the next token, then the next, until it reaches the end of the sequence.
Attention is computed between every query and every key, and the values are mixed by the weights.
Training loss goes down, evaluation loss goes down, and the learning rate follows a cosine schedule.
"""


@functools.lru_cache(maxsize=1)
def _byte_level():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _pretokenize(text: str) -> list[str]:
    return [piece for piece, _ in _byte_level().pre_tokenize_str(text)]


@functools.lru_cache(maxsize=1)
def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import pre_tokenizers

    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    # Byte symbols in byte order (alphabet() is a set: sort by the byte each symbol stands for).
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=_byte_of_symbol)
    for symbol in alphabet:
        vocab[symbol] = len(vocab)

    words = collections.Counter(_pretokenize(_CORPUS))
    split = {word: list(word) for word in words}
    merges: list[tuple[str, str]] = []
    while len(vocab) < VOCAB_SIZE:
        pairs: collections.Counter = collections.Counter()
        for word, count in words.items():
            symbols = split[word]
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            raise RuntimeError("tiny tokenizer corpus too small for the vocabulary size")
        # Highest count first; equal counts broken by the pair itself (deterministic).
        best = min(pairs.items(), key=lambda item: (-item[1], item[0]))[0]
        merged = best[0] + best[1]
        merges.append(best)
        if merged not in vocab:
            vocab[merged] = len(vocab)
        for word in words:
            symbols = split[word]
            if len(symbols) < 2:
                continue
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            split[word] = out
    return vocab, merges


@functools.lru_cache(maxsize=1)
def _byte_symbol_table() -> dict[str, int]:
    # GPT-2's printable mapping of the 256 bytes (same table tokenizers' ByteLevel uses).
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
    printable += list(range(ord("\u00ae"), ord("\u00ff") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _byte_of_symbol(symbol: str) -> int:
    return _byte_symbol_table()[symbol]


def special_tokens(named: dict[int, str] | None = None) -> list[str]:
    """The 16 special tokens, with reserved ids renamed as `named` says (``{5: "<image>"}``: a
    vision-language processor finds its placeholder token by name, its config by id)."""
    tokens = list(SPECIAL_TOKENS)
    for token_id, name in (named or {}).items():
        if token_id not in RESERVED_TOKEN_IDS:
            raise ValueError(f"token id {token_id} is not a reserved id ({RESERVED_TOKEN_IDS[0]}-"
                             f"{RESERVED_TOKEN_IDS[-1]}): only reserved ids can be given a name")
        if name in tokens:
            raise ValueError(f"token {name!r} is already in the vocabulary")
        tokens[token_id] = name
    return tokens


def build_backend_tokenizer(named: dict[int, str] | None = None):
    """The raw `tokenizers.Tokenizer` (byte-level BPE, special tokens registered; reserved ids renamed
    as `named` says)."""
    from tokenizers import Tokenizer, decoders, models

    vocab, merges = _vocab_and_merges()
    specials = special_tokens(named)
    vocab = {(specials[i] if i < NUM_SPECIAL_TOKENS else token): i for token, i in vocab.items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), fuse_unk=False))
    tok.pre_tokenizer = _byte_level()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def build_tokenizer(*, padding_side: str = "left", model_max_length: int = 2048, named: dict[int, str] | None = None,
                    attributes: dict[str, str] | None = None):
    """A deterministic :class:`~transformers.PreTrainedTokenizerFast` of 512 tokens.

    pad/bos/eos are distinct (``<|pad|>`` 0, ``<|startoftext|>`` 1, ``<|im_end|>`` 2); no token is added
    automatically by ``__call__``; ``apply_chat_template(messages, add_generation_prompt=True)`` renders
    ChatML turns ending with ``<|im_end|>`` (the eos, so generation stops at the end of a turn).
    Padding is on the left (batched generation with decoder-only models). `named` gives reserved ids
    the names a vision-language processor looks its placeholders up by (same ids, same vocabulary size);
    `attributes` makes them tokenizer attributes (``{"image_token": "<image>"}``: ``tokenizer.image_token``
    and ``tokenizer.image_token_id``), which some processors read instead.
    """
    from transformers import PreTrainedTokenizerFast

    specials = special_tokens(named)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=build_backend_tokenizer(named),
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=specials[len(NAMED_SPECIAL_TOKENS) - 2:],
        padding_side=padding_side,
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        **({"extra_special_tokens": dict(attributes)} if attributes else {}),
    )
    return tokenizer


def tokenizer_fingerprint() -> str:
    """A short hash of the vocabulary and merges (for tests and cache keys)."""
    import hashlib

    vocab, merges = _vocab_and_merges()
    blob = json.dumps([sorted(vocab.items()), merges], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
