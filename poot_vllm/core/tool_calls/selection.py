"""Which codec a model uses, and which one this server forces with.

A model names its format in its chat template (the markers it renders tool
calls with); the model type is the fallback for templates without markers.
``POOT_TOOL_CODEC`` (``hermes``, ``mistral``, ``llama3`` or ``none``)
overrides both.  The API server records the ``--tool-call-parser`` it runs
with (adapter/patches/tool_responses.py), since forced calls must be in the format
that parser reads back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from poot_vllm.core.tool_calls.codecs import CODECS, Codec, get_codec

OVERRIDE_ENV = "POOT_TOOL_CODEC"

#: Template markers, checked in order (a template may mention several; the first that renders calls wins).
_TEMPLATE_MARKERS = (("<tool_call>", "hermes"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"))
#: model_type -> codec when the template has no marker.
_MODEL_TYPES = {
    "qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
    "mistral": "mistral", "mixtral": "mistral",
}
#: vLLM tool parsers -> the codec whose text they read.
_PARSERS = {"hermes": "hermes", "mistral": "mistral", "llama3_json": "llama3", "llama4_json": "llama3"}


def override() -> Codec | None | str:
    """The codec named by ``POOT_TOOL_CODEC`` (None for ``none``), or ``""`` when unset."""
    raw = os.environ.get(OVERRIDE_ENV, "").strip().lower()
    if not raw:
        return ""
    if raw in ("none", "off"):
        return None
    return get_codec(raw)


def _mistral_version(codec: Codec, chat_template: str | None, vocabulary=None) -> Codec:
    """Mistral v11+ (``[ARGS]``) or not: by the vocabulary when known (vLLM's mistral
    parser decides by it), else by the chat template (v11+ templates write ``[ARGS]``)."""
    if codec.name != "mistral":
        return codec
    v11 = CODECS["mistral_v11"]
    if vocabulary is not None:
        try:
            return v11 if v11.args_marker in vocabulary else codec
        except TypeError:  # not a container of tokens: decide by the template
            pass
    return v11 if v11.args_marker in (chat_template or "") else codec


def codec_for(chat_template: str | None, model_type: str | None = None) -> Codec | None:
    """The model's codec from its chat template markers, else its model type (override first)."""
    forced = override()
    if forced != "":
        return forced  # type: ignore[return-value]
    template = chat_template or ""
    for marker, name in _TEMPLATE_MARKERS:
        if marker in template:
            return _mistral_version(CODECS[name], template)
    name = _MODEL_TYPES.get((model_type or "").lower())
    return CODECS[name] if name else None


def read_chat_template(model_dir: str | Path) -> str | None:
    """The chat template a HF model directory ships (``chat_template.jinja`` or tokenizer_config)."""
    model_dir = Path(model_dir)
    jinja = model_dir / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text(encoding="utf-8")
    config = model_dir / "tokenizer_config.json"
    if config.exists():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            return "\n".join(t.get("template", "") for t in template if isinstance(t, dict))
        return template
    return None


def codec_for_model_dir(model_dir: str | Path) -> Codec | None:
    model_dir = Path(model_dir)
    model_type = None
    config = model_dir / "config.json"
    if config.exists():
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    return codec_for(read_chat_template(model_dir), model_type)


def codec_for_parser(parser_name: str | None, chat_template: str | None = None, vocabulary=None) -> Codec | None:
    """The codec whose text a vLLM tool parser reads (``poot``: the model's own).

    ``vocabulary`` (the tokenizer's tokens, any container) tells which of its
    formats vLLM's mistral parser reads: with ``[ARGS]`` only the v11+
    control-token format, which poot does not force.  Without it, the chat
    template tells.
    """
    if not parser_name:
        return None
    if parser_name == "poot":
        codec = codec_for(chat_template)
        return _mistral_version(codec, chat_template, vocabulary) if codec is not None else None
    name = _PARSERS.get(parser_name)
    return _mistral_version(CODECS[name], chat_template, vocabulary) if name else None


# --- this server (API-server process) ---------------------------------------
_server_codec: Codec | None = None


def record_server_codec(codec: Codec | None) -> None:
    global _server_codec
    _server_codec = codec


def server_codec() -> Codec | None:
    """The codec of the server's tool parser (``POOT_TOOL_CODEC`` overrides it)."""
    forced = override()
    return _server_codec if forced == "" else forced  # type: ignore[return-value]
