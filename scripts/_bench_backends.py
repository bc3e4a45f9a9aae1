"""Shared helpers for the benchmark scripts (``scripts/bench_masks.py``,
``scripts/bench_e2e.py``).

Nothing here is imported by the backend; it exists so the benchmarks drive
every engine exactly as vLLM does: through its ``StructuredOutputBackend``
class, built with the same (vLLM-wrapped) tokenizer, vocab size and a minimal
stand-in for ``VllmConfig`` (the backends read only the attributes below).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

#: Where the shared bench data lives (``<repo>/../shared/bench-data``), overridable.
BENCH_DATA = Path(os.environ.get("POOT_BENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "bench-data"))

ENGINES = ("poot", "xgrammar", "guidance", "outlines")


def stand_in_vllm_config(model_type: str = "llama", num_speculative_tokens: int = 0) -> Any:
    """The few ``VllmConfig`` attributes the structured-output backends read."""
    spec = SimpleNamespace(num_speculative_tokens=num_speculative_tokens) if num_speculative_tokens else None
    return SimpleNamespace(
        structured_outputs_config=SimpleNamespace(
            disable_any_whitespace=False,
            disable_additional_properties=False,
            backend="auto",
            disable_fallback=True,
        ),
        speculative_config=spec,
        model_config=SimpleNamespace(hf_config=SimpleNamespace(model_type=model_type)),
    )


def load_tokenizer(name_or_path: str | Path) -> Any:
    """A bench vocabulary (``vocab/<name>`` or a path) as vLLM wraps it."""
    from transformers import AutoTokenizer
    from vllm.tokenizers.hf import get_cached_tokenizer

    path = Path(name_or_path)
    if not path.exists():
        path = BENCH_DATA / "vocab" / str(name_or_path)
    return get_cached_tokenizer(AutoTokenizer.from_pretrained(str(path)))


def make_backend(engine: str, tokenizer: Any, vocab_size: int, vllm_config: Any | None = None) -> Any:
    """``engine``'s vLLM ``StructuredOutputBackend`` over ``tokenizer``."""
    config = vllm_config if vllm_config is not None else stand_in_vllm_config()
    if engine == "poot":
        from poot_vllm.adapter.backend import PootBackend as cls
    elif engine == "xgrammar":
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend as cls
    elif engine == "guidance":
        from vllm.v1.structured_output.backend_guidance import GuidanceBackend as cls
    elif engine == "outlines":
        from vllm.v1.structured_output.backend_outlines import OutlinesBackend as cls
    else:
        raise ValueError(f"unknown engine {engine!r}; one of {ENGINES}")
    return cls(vllm_config=config, tokenizer=tokenizer, vocab_size=vocab_size)


def clear_caches(engine: str, backend: Any) -> None:
    """Drop everything an engine caches across requests, so the next compile is cold."""
    if engine == "poot":
        from poot_vllm.core import constraints
        from poot_vllm.core.cache import compiled_cache

        constraints._automata.clear()
        # Compiled constraints go; the per-vocabulary trie and compiler stay, like xgrammar's,
        # and so do the loop walks (core.lazy_masks: a JSON string body's tokens and their counter lists, shared by
        # every constraint in a running server).
        compiled_cache().clear(keep=lambda key: key[0] in ("trie", "xgrammar-compiler", "loop-walk", "loop-guard"))
    elif engine == "xgrammar":
        backend.compiler.clear_cache()
    elif engine == "outlines":
        backend.cache.clear()
    # guidance: no cross-request cache (an LLMatcher is built per request).


@dataclass
class BenchItem:
    """One constraint of the bench data, as vLLM's (option, spec) key."""

    id: str
    subset: str
    kind: str            # json | regex | choice | grammar
    spec: str            # what vLLM hands ``compile_grammar``
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def option(self) -> Any:
        from vllm.v1.structured_output.backend_types import StructuredOutputOptions as O

        return {"json": O.JSON, "regex": O.REGEX, "choice": O.CHOICE, "grammar": O.GRAMMAR}[self.kind]

    def key_for(self, engine: str) -> tuple[Any, str]:
        """The (option, spec) vLLM hands ``engine``'s ``compile_grammar``: vLLM's
        request validation rewrites ``guided_choice`` into an EBNF grammar for
        xgrammar (``choice_as_grammar``); every other engine gets it as is."""
        if engine == "xgrammar" and self.kind == "choice":
            from vllm.v1.structured_output.backend_types import StructuredOutputOptions as O
            from vllm.v1.structured_output.utils import choice_as_grammar

            return O.GRAMMAR, choice_as_grammar(json.loads(self.spec))
        return self.option, self.spec

    def validator(self) -> Callable[[str], bool]:
        """Oracle for a finished reply: jsonschema, ``re.fullmatch``, membership, Lark."""
        if self.kind == "json":
            import jsonschema

            schema = json.loads(self.spec)
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            v = cls(schema, format_checker=None)

            def check_json(text: str) -> bool:
                try:
                    return v.is_valid(json.loads(text))
                except (ValueError, RecursionError):
                    return False
            return check_json
        if self.kind == "regex":
            import re

            try:
                pat = re.compile(self.spec)
            except re.error:
                return lambda text: True  # Python's re cannot parse it: no oracle
            return lambda text: pat.fullmatch(text) is not None
        if self.kind == "choice":
            options = set(json.loads(self.spec))
            return lambda text: text in options
        if self.kind == "grammar":
            import lark

            parser = lark.Lark(self.raw["lark"], start="start")

            def check_grammar(text: str) -> bool:
                try:
                    parser.parse(text)
                    return True
                except lark.exceptions.LarkError:
                    return False
            return check_grammar
        raise ValueError(self.kind)


def _items_of(path: Path) -> Iterator[BenchItem]:
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            kind = d["kind"]
            if kind == "json":
                spec = json.dumps(d["schema"])
            elif kind == "regex":
                spec = d["regex"]
            elif kind == "choice":
                spec = json.dumps(d["choice"])
            elif kind == "grammar":
                spec = d["gbnf"]
            else:
                continue
            yield BenchItem(d["id"], d.get("subset", kind), kind, spec, d)


def _string(max_length: int, **extra: Any) -> dict:
    return {"type": "string", "maxLength": max_length, **extra}


def _model(fields: dict) -> dict:
    """A Pydantic-style object schema: every field required, no extra keys."""
    return {"type": "object", "properties": fields, "required": sorted(fields), "additionalProperties": False}


def _required_tools_schema(tools: dict) -> dict:
    """The JSON schema vLLM compiles for ``tool_choice: "required"`` on other backends
    (``vllm/entrypoints/openai/...`` ``_get_json_schema_from_tool``): a non-empty
    array of ``{"name", "parameters"}`` calls."""
    calls = [{"type": "object", "properties": {"name": {"type": "string", "enum": [name]}, "parameters": params},
              "required": ["name", "parameters"]} for name, params in tools.items()]
    return {"type": "array", "minItems": 1, "items": {"anyOf": calls}}


_ADDRESS = _model({"street": _string(100), "city": _string(60), "zip": _string(10)})
_CUSTOMER = _model({"name": _string(80), "email": _string(120), "address": _ADDRESS})
_ORDER = _model({"customer_id": _string(40), "items": {
    "type": "array", "maxItems": 5, "items": _model({"sku": _string(40), "quantity": {"type": "integer", "minimum": 1}})}})

#: What client libraries send every day and poot refused before counted repetitions
#: (issue 13): long text fields, wide models, nested tools with parallel calls allowed.
CLIENT_MODELS = {
    "text_250": _model({"body": _string(250)}),
    "text_4000": _model({"title": _string(120), "body": _string(4000)}),
    "two_130": _model({"headline": _string(130), "summary": _string(130)}),
    "wide_30": _model({**{f"text_{i:02d}": _string(200) for i in range(10)},
                       **{f"count_{i:02d}": {"type": "integer", "minimum": 0, "maximum": 10_000} for i in range(10)},
                       **{f"flag_{i:02d}": {"type": "boolean"} for i in range(5)},
                       **{f"tag_{i:02d}": {"enum": ["low", "medium", "high"]} for i in range(5)}}),
    "nested_tools_required": _required_tools_schema({"create_customer": _CUSTOMER, "create_order": _ORDER}),
    # A user profile as Pydantic writes it: EmailStr, HttpUrl, a hostname, a date-time.
    "profile_formats": _model({"name": _string(80), "email": {"type": "string", "format": "email"},
                               "homepage": {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083},
                               "host": {"type": "string", "format": "hostname"},
                               "joined": {"type": "string", "format": "date-time"}}),
    # constr(pattern=..., max_length=...) as Pydantic writes it: a pattern beside a large length.
    "pattern_lengths": _model({"code": _string(500, pattern="^[A-Z]{2}-\\d+$"),
                               "title": _string(250, pattern="^[A-Z]"),
                               "link": _string(2083, pattern="^https?://")}),
    # Eight optional `Any` fields beside an id (`field: Any = None`): a free-form value per field.
    "many_any": {**_model({"id": _string(12), **{f"field_{i}": {} for i in range(8)}}), "required": ["id"]},
}


def _client_model_items() -> list[BenchItem]:
    return [BenchItem(f"Client_models/{name}", "Client_models", "json", json.dumps(schema), {"schema": schema})
            for name, schema in CLIENT_MODELS.items()]


def load_items(subsets: list[str] | None = None, data: Path = BENCH_DATA) -> list[BenchItem]:
    """JSONSchemaBench by subset, then regexes, choices and grammars (subset names
    are the files' ``subset`` fields; ``None`` = all), then the built-in
    ``Client_models`` (:data:`CLIENT_MODELS`)."""
    files = sorted((data / "jsonschemabench").glob("*.jsonl"))
    files += [data / "regex.jsonl", data / "choice.jsonl", data / "grammar.jsonl"]
    items = [it for p in files if p.exists() for it in _items_of(p)] + _client_model_items()
    if subsets:
        wanted = {s.lower() for s in subsets}
        items = [it for it in items if it.subset.lower() in wanted or it.kind in wanted]
    return items
