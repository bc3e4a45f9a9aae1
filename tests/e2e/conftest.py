"""E2E fixtures: one real `vllm serve --guided-decoding-backend poot` per tiny model.

The servers are package-scoped: started by the first e2e test that needs one,
shared by every e2e test, stopped when the last e2e test is done, so the unit
tests that run after them have the machine's cores to themselves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.server import REPO, TEST_SERVER_ARGS, Server, external_server, start_server

pytestmark = pytest.mark.e2e


def _models_dir() -> Path:
    return Path(os.environ.get("POOT_MODELS_DIR", REPO / ".models"))


def _server(request, name: str, kind: str, extra_args: tuple[str, ...] = (), timeout: float = 240.0,
            eager: bool = True) -> Server:
    """``eager``: start with ``TEST_SERVER_ARGS`` (``--enforce-eager``; see tests/e2e/server.py)."""
    ext = external_server()
    if ext is not None:
        if name != "default":
            pytest.skip(f"POOT_E2E_URL given: the {name} tiny-model tests need their own tiny-model server; "
                        "unset POOT_E2E_URL to run them")
        yield ext
        return
    model = _models_dir() / name
    if not (model / "config.json").exists():
        pytest.fail(f"tiny model {model} missing: run scripts/make_tiny_models.py {_models_dir()}")
    log_dir = Path(request.config.rootpath) / ".e2e-logs"
    log_dir.mkdir(exist_ok=True)
    server = start_server(model, log_dir, [*(TEST_SERVER_ARGS if eager else ()), *extra_args], timeout=timeout)
    server.tokenizer_kind = kind
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def spm_server(request):
    """Tiny Llama + SentencePiece tokenizer (the README's default model), with hermes tool
    calling on (its ChatML template renders ``<tool_call>``), as ``scripts/serve`` starts it."""
    yield from _server(request, "tiny-llama-spm", "sentencepiece",
                       ("--enable-auto-tool-choice", "--tool-call-parser", "hermes"))


@pytest.fixture(scope="package")
def bpe_server(request):
    """Tiny Qwen2 + byte-level BPE tokenizer, with hermes tool calling on."""
    yield from _server(request, "tiny-qwen2-bpe", "byte_level",
                       ("--enable-auto-tool-choice", "--tool-call-parser", "hermes"))


@pytest.fixture(scope="package")
def think_server(request):
    """Tiny Qwen2 whose template opens a ``<think>`` block, with vLLM's ``qwen3``
    reasoning parser (which also sets up ``thinking_token_budget``), and vLLM's
    ``llama3_json`` tool parser (its tokenizer has ``<|python_tag|>``): the
    server that tests reasoning and poot's Llama 3 tool-call forcing."""
    yield from _server(request, "tiny-qwen2-bpe-think", "byte_level",
                       ("--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"))


@pytest.fixture(scope="package")
def mistral_server(request):
    """Tiny Mistral with Mistral's own v3 SentencePiece tokenizer (control tokens
    ``[TOOL_CALLS]``, ``[AVAILABLE_TOOLS]``, ...; the Hugging Face tokenizer, vLLM's
    ``tokenizer_mode auto`` default) and mistral_common's chat template, with vLLM's
    ``mistral`` tool parser: the server that tests poot's Mistral tool-call forcing."""
    yield from _server(request, "tiny-mistral-spm", "sentencepiece",
                       ("--enable-auto-tool-choice", "--tool-call-parser", "mistral"))


@pytest.fixture(scope="package")
def mistral_common_server(request):
    """The same tiny Mistral served with ``--tokenizer-mode mistral``: ``mistral_common``'s
    tokenizer and prompt rendering (what ``tokenizer_mode auto`` picks for the hub's
    Mistral repositories), with vLLM's ``mistral`` tool parser."""
    yield from _server(request, "tiny-mistral-spm", "sentencepiece",
                       ("--tokenizer-mode", "mistral", "--enable-auto-tool-choice", "--tool-call-parser", "mistral"))


@pytest.fixture(scope="package")
def server(request):
    """The default server: POOT_E2E_URL if given, else the tiny SentencePiece model."""
    ext = external_server()
    if ext is not None:
        yield ext
        return
    yield request.getfixturevalue("spm_server")


@pytest.fixture(scope="package")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0, timeout=120)
