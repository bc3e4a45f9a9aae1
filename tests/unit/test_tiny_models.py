"""The tiny test models load offline, run, and have the tokens and chat
template the end-to-end tests rely on (no vLLM server needed)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Required test dependencies (test extras, vLLM): an import failure fails these tests, never skips them.
import torch  # noqa: E402
import transformers  # noqa: E402

MAKE_TINY_MODELS = Path(__file__).resolve().parents[2] / "scripts" / "make_tiny_models.py"
TINY_MODEL_NAMES = ("tiny-llama-spm", "tiny-qwen2-bpe", "tiny-qwen2-bpe-think")  # the ChatML models
MISTRAL_NAME = "tiny-mistral-spm"  # Mistral's own tokenizer and template (tests below)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]


@pytest.fixture(scope="module", params=TINY_MODEL_NAMES)
def model_dir(request, tiny_models_dir) -> Path:
    return tiny_models_dir / request.param


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return transformers.AutoTokenizer.from_pretrained(str(model_dir))


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_model_loads_offline_and_runs(model_dir, tokenizer):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    config = _read_json(model_dir / "config.json")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), config["vocab_size"])
    assert torch.isfinite(logits.float()).all()


def test_config_shape_and_padded_vocab(model_dir, tokenizer):
    config = _read_json(model_dir / "config.json")
    assert config["hidden_size"] // config["num_attention_heads"] >= 32  # vLLM CPU attention needs it
    assert config["num_hidden_layers"] == 2
    assert config["max_position_embeddings"] >= 2048
    # Padded like real checkpoints: the model can emit ids the tokenizer lacks.
    assert config["vocab_size"] % 64 == 0
    assert len(tokenizer) < config["vocab_size"] < len(tokenizer) + 64
    assert 2000 <= len(tokenizer) <= 4000
    size = sum(f.stat().st_size for f in model_dir.iterdir())
    assert 1_000_000 <= size <= 5_000_000


def test_special_and_added_tokens(model_dir, tokenizer):
    added = tokenizer.added_tokens_decoder
    by_text = {tok.content: (i, tok) for i, tok in added.items()}
    for name in ("<|im_start|>", "<|im_end|>"):
        assert by_text[name][1].special, name
    for name in ("<tool_call>", "</tool_call>"):
        assert not by_text[name][1].special, name
    assert tokenizer.eos_token == "<|im_end|>"

    # Each is one token, and only the non-special ones survive skip_special_tokens.
    text = "<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    for name in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert ids.count(by_text[name][0]) == 1
    shown = tokenizer.decode(ids, skip_special_tokens=True)
    assert "<tool_call>" in shown and "</tool_call>" in shown
    assert "<|im_end|>" not in shown and "<|im_start|>" not in shown

    gen = _read_json(model_dir / "generation_config.json")
    eos = gen["eos_token_id"]
    assert tokenizer.eos_token_id in eos and len(eos) == 2
    assert all(tokenizer.convert_ids_to_tokens(i) in tokenizer.all_special_tokens for i in eos)


def test_vocabulary_has_common_pieces(model_dir, tokenizer):
    vocab = tokenizer.get_vocab()
    space = "▁" if "spm" in model_dir.name else "Ġ"
    assert space + "the" in vocab
    assert '":' in vocab
    assert any(p.endswith('{"') for p in vocab)
    assert all(str(d) in vocab for d in range(10))
    if "spm" in model_dir.name:
        assert all(f"<0x{b:02X}>" in vocab for b in range(256))  # byte fallback
        assert tokenizer.convert_ids_to_tokens(tokenizer.encode("\n", add_special_tokens=False)) == ["▁", "<0x0A>"]
    decoder = json.loads(tokenizer.backend_tokenizer.decoder.__getstate__())
    types = json.dumps(decoder)
    assert ("ByteFallback" in types) == ("spm" in model_dir.name)
    assert ("ByteLevel" in types) == ("bpe" in model_dir.name)


def _tool_call_payloads(rendered: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", rendered, re.S)]


@pytest.mark.parametrize("arguments", [{"city": "Paris"}, '{"city": "Paris"}'], ids=["dict", "json-string"])
def test_chat_template_renders_tools_hermes_style(tokenizer, arguments):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.")
    listed = re.search(r"<tools>\n(.*?)\n</tools>", system, re.S).group(1).split("\n")
    assert [json.loads(line) for line in listed] == TOOLS
    calls = _tool_call_payloads(text.split("<|im_start|>assistant", 1)[1])
    assert calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n") or text.endswith("<|im_start|>assistant\n<think>\n")


def test_chat_template_without_tools_is_plain_chatml(tokenizer):
    messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"},
                {"role": "user", "content": "Bye"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert text == "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    ids = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")  # no BOS in ChatML prompts


def test_vllm_loads_the_tokenizer(model_dir, tokenizer):
    import vllm.tokenizers as vllm_tokenizers

    tok = vllm_tokenizers.get_tokenizer(str(model_dir))
    assert len(tok) == len(tokenizer)
    assert tok.eos_token_id == tokenizer.eos_token_id
    text = 'x = {"a": 1} <tool_call>'
    assert tok.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def test_build_is_deterministic(tiny_models_dir, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(MAKE_TINY_MODELS), str(tmp_path)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name in TINY_MODEL_NAMES + (MISTRAL_NAME,):
        fresh = _tree_digest(tmp_path / name)
        assert "model.safetensors" in fresh and "tokenizer.json" in fresh
        assert fresh == _tree_digest(tiny_models_dir / name), name


def test_think_model_has_single_think_tokens_and_a_thinking_template(tiny_models_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-qwen2-bpe-think"))
    by_text = {t.content: (i, t) for i, t in tok.added_tokens_decoder.items()}
    for name in ("<think>", "</think>"):
        assert not by_text[name][1].special, name  # plain: the reasoning parser splits the text at it
        assert tok.encode(f"a{name}b", add_special_tokens=False).count(by_text[name][0]) == 1
    messages = [{"role": "user", "content": "hi"}]
    on = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    off = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert on.endswith("<|im_start|>assistant\n<think>\n")
    assert off == on + "\n</think>\n\n"


# --- tiny-mistral-spm: Mistral-7B-Instruct-v0.3's tokenizer and mistral_common's template -------------
def _mistral_common_tokenizer():
    import mistral_common
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(str(Path(mistral_common.__file__).parent / "data"
                                          / "mistral_instruct_tokenizer_240323.model.v3"))


@pytest.fixture(scope="module")
def mistral_dir(tiny_models_dir) -> Path:
    return tiny_models_dir / MISTRAL_NAME


def test_mistral_model_has_mistrals_vocabulary_and_control_tokens(mistral_dir):
    tok = transformers.AutoTokenizer.from_pretrained(str(mistral_dir))
    config = _read_json(mistral_dir / "config.json")
    assert config["model_type"] == "mistral" and config["architectures"] == ["MistralForCausalLM"]
    assert config["vocab_size"] == len(tok) == 32768 and config["eos_token_id"] == tok.eos_token_id == 2
    controls = {"<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[TOOL_CALLS]": 5, "[AVAILABLE_TOOLS]": 6,
                "[/AVAILABLE_TOOLS]": 7, "[TOOL_RESULTS]": 8, "[/TOOL_RESULTS]": 9}
    for text, i in controls.items():
        assert tok.convert_tokens_to_ids(text) == i and tok.added_tokens_decoder[i].special, text
    # Pre-v11: no [ARGS], so vLLM's mistral parser reads calls as "[TOOL_CALLS] [{...}]" arrays.
    assert "[ARGS]" not in tok.get_vocab()
    # tokenizer.model.v3 serves --tokenizer-mode mistral (mistral_common's tokenizer, test_tools_mistral_common.py);
    # without consolidated*.safetensors vLLM's tokenizer_mode auto still picks the Hugging Face tokenizer.
    assert [p.name for p in mistral_dir.glob("tokenizer.model.v*")] == ["tokenizer.model.v3"]
    assert not (mistral_dir / "tekken.json").exists() and not list(mistral_dir.glob("consolidated*.safetensors"))
    reference = _mistral_common_tokenizer().instruct_tokenizer.tokenizer
    for text in ['[{"name": "get_forecast", "arguments":{"city": "Zürich"}}]', "naïve\n日本 ☃ 😀"]:
        assert tok.encode(text, add_special_tokens=False) == reference.encode(text, bos=False, eos=False), text


def test_mistral_template_encodes_as_mistral_common_does(mistral_dir):
    """A tool conversation through the model's chat template and Hugging Face
    tokenizer gives the token ids mistral_common itself encodes it to."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    tok = transformers.AutoTokenizer.from_pretrained(str(mistral_dir))
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "abcdefghi", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny"},
        {"role": "user", "content": "And Oslo?"},
    ]
    ids = tok.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=False)
    expected = _mistral_common_tokenizer().encode_chat_completion(ChatCompletionRequest(messages=messages, tools=TOOLS))
    assert ids == expected.tokens
    text = tok.decode(ids)
    assert text.startswith("<s>[INST] Weather in Paris?[/INST][TOOL_CALLS] [")
    assert "[AVAILABLE_TOOLS] [" in text and text.endswith("[INST] And Oslo?[/INST]")


def test_vllm_reads_mistral_tool_calls_with_this_tokenizer(mistral_dir):
    """vLLM loads the Hugging Face tokenizer (tokenizer_mode auto), and its mistral
    tool parser finds [TOOL_CALLS] and takes its pre-v11 (bare JSON array) path."""
    import vllm.tokenizers as vllm_tokenizers
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.mistral_tool_parser import MistralToolParser

    tok = vllm_tokenizers.get_tokenizer(str(mistral_dir))
    assert len(tok) == 32768 and not getattr(tok, "supports_grammar", False)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                    tool_choice="required")
    parser = MistralToolParser(tok, request.tools)
    assert parser.bot_token_id == 5
    info = parser.extract_tool_calls('[{"name": "get_weather", "arguments":{"city": "Paris"}}]', request)
    assert info.tools_called and [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] \
        == [("get_weather", {"city": "Paris"})]
