"""Tool-call codecs (reference encode/parse/stream, tests/helpers), forced-call constraints, codec selection."""

from __future__ import annotations

import json
import random
import re
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poot_vllm.core.constraints import Constraint, Kind, check, compile_automaton
from poot_vllm.core.errors import LimitExceeded, PootError
from poot_vllm.core.grammar.gbnf import Grammar
from poot_vllm.core.json_schema import RECURSION_DEPTHS
from poot_vllm.core.limits import Limits
from poot_vllm.core.tool_calls import codec_for, get_codec, tool_call_spec
from poot_vllm.core.automata.compilers import regex_escape, regex_to_dfa
from poot_vllm.core.tool_calls.forcing import compile_tool_call_constraint, repeat_with_separator, tool_call_regex
from poot_vllm.adapter.tool_forcing import tool_constraint_for
from tests.helpers.tool_codecs import HERMES_TEXT, TEXT_CODECS, ToolCall, forced_spelling
from tests.helpers.tool_streaming import ToolCallStream, assemble

HERMES = get_codec("hermes")  # the product codec poot forces with

# --- strategies ---------------------------------------------------------------
names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_\-]{0,20}", fullmatch=True)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['say "hi"', "back\\slash", "naïve ☃ 日本", "</tool_call>", "[TOOL_CALLS]", "{\"x\": 1}", "\n\t"])
scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(text, inner, max_size=3), max_leaves=8)
arguments = st.dictionaries(text, json_values, max_size=4)
calls = st.lists(st.builds(ToolCall.of, names, arguments), min_size=1, max_size=3)


def canonical(call: ToolCall) -> tuple[str, object]:
    return call.name, json.loads(call.arguments)


# --- round trips --------------------------------------------------------------
@pytest.mark.parametrize("codec", list(TEXT_CODECS.values()), ids=list(TEXT_CODECS))
@settings(max_examples=150, deadline=None)
@given(calls=calls)
def test_encode_parse_round_trip(codec, calls):
    parsed = codec.parse(codec.encode(calls))
    assert parsed.content is None
    assert [canonical(c) for c in parsed.calls] == [canonical(c) for c in calls]


@pytest.mark.parametrize("codec", list(TEXT_CODECS.values()), ids=list(TEXT_CODECS))
def test_nested_unicode_and_escaped_quotes(codec):
    call = ToolCall.of("lookup", {"q": 'he said "ok" \\ done', "where": {"city": "Zürich 東京", "tags": ["a", {"b": None}]}})
    reply = codec.parse("Let me check.\n" + codec.encode([call]))
    assert reply.content == "Let me check.\n"
    assert [canonical(c) for c in reply.calls] == [canonical(call)]


@pytest.mark.parametrize("codec", list(TEXT_CODECS.values()), ids=list(TEXT_CODECS))
def test_text_without_calls_is_content(codec):
    assert codec.parse("just words").content == "just words"
    assert codec.parse("just words").calls == []
    broken = codec.start_marker + '{"name": "f", "arguments": {"a": '
    assert codec.parse(broken).calls == [] and codec.parse(broken).content == broken


def test_hermes_text_is_what_the_template_renders():
    call = ToolCall.of("f", {"a": 1})
    assert HERMES_TEXT.encode([call, call]) == (
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    )


# --- streaming ----------------------------------------------------------------
def _stream(codec, reply: str, cuts: list[int]):
    stream = ToolCallStream(codec)
    bounds = sorted({0, len(reply), *(c % (len(reply) + 1) for c in cuts)})
    deltas = [stream.feed(reply[a:b]) for a, b in zip(bounds, bounds[1:])]
    return deltas + [stream.finish()]


@pytest.mark.parametrize("codec", list(TEXT_CODECS.values()), ids=list(TEXT_CODECS))
@settings(max_examples=150, deadline=None)
@given(calls=calls, prefix=st.sampled_from(["", "Sure: ", "<tool", "[TOOL", "x"]), cuts=st.lists(st.integers(0, 10**4), max_size=40))
def test_streaming_assembles_to_the_parse(codec, calls, prefix, cuts):
    if codec.name == "llama3" and prefix.startswith("{"):
        return
    reply = prefix + codec.encode(calls)
    deltas = _stream(codec, reply, cuts)
    content, streamed = assemble(deltas)
    parsed = codec.parse(reply)
    assert content == (parsed.content or "")
    assert [(n, json.loads(a)) for _, n, a in streamed] == [canonical(c) for c in parsed.calls]
    ids = [i for i, _, _ in streamed]
    assert all(ids) and len(set(ids)) == len(ids)


@settings(max_examples=100, deadline=None)
@given(calls=calls, cuts=st.lists(st.integers(0, 10**4), max_size=60))
def test_hermes_streams_arguments_in_pieces_without_markup(calls, cuts):
    deltas = _stream(HERMES_TEXT, HERMES_TEXT.encode(calls), cuts)
    sent = [""] * len(calls)
    named: set[int] = set()
    for d in deltas:
        assert not d.content  # the reply starts with the call: no content, no markup
        for c in d.calls:
            if c.id:
                named.add(c.index)
            assert c.index in named  # a call's id and name come before its arguments
            sent[c.index] += c.arguments
            # Never text of the envelope: always a prefix of the call's exact arguments.
            assert calls[c.index].arguments.startswith(sent[c.index])
    assert sent == [c.arguments for c in calls]


def test_stream_of_plain_text_is_content_even_when_it_looks_like_a_marker():
    deltas = _stream(HERMES_TEXT, "a <tool", [3, 5])
    assert assemble(deltas) == ("a <tool", [])


# --- forced-call constraints --------------------------------------------------
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Oslo", "Zürich"]},
    "unit": {"type": "string", "maxLength": 3},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "where": {"type": "object", "properties": {"lat": {"type": "integer", "minimum": -90, "maximum": 90}},
              "required": ["lat"], "additionalProperties": False},
}, "required": ["city"], "additionalProperties": False}
TOOLS = [("get_weather", WEATHER), ("ping", None)]


def _dfa_matches(spec: str, reply: str) -> bool:
    return compile_automaton(Constraint(Kind.TOOL_CALL, spec)).matches(reply.encode())  # cached


weather_args = st.fixed_dictionaries({"city": st.sampled_from(["Paris", "Oslo", "Zürich"])}, optional={
    "unit": st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3),
    "days": st.integers(1, 7),
    "where": st.fixed_dictionaries({"lat": st.integers(-90, 90)}),
})
forced_calls = st.lists(st.one_of(st.builds(ToolCall.of, st.just("get_weather"), weather_args),
                                  st.just(ToolCall.of("ping", {}))), min_size=1, max_size=3)


def _ordered(call: ToolCall) -> ToolCall:
    """The spelling poot emits: object keys in sorted order (docs/json-schema.md), ``<`` as ``\\u003c`` (tools.md)."""
    return ToolCall(call.name, forced_spelling(dict(sorted(json.loads(call.arguments).items()))))


@settings(max_examples=100, deadline=None)
@given(calls=forced_calls)
def test_forced_language_accepts_every_valid_call_sequence(calls):
    calls = [_ordered(c) for c in calls]
    reply = HERMES_TEXT.encode(calls)
    parallel = tool_call_spec(TOOLS, parallel=True)
    single = tool_call_spec(TOOLS, parallel=False)
    assert _dfa_matches(parallel, reply)
    assert re.fullmatch(tool_call_regex(parallel), reply)
    assert _dfa_matches(single, reply) == (len(calls) == 1)


@pytest.mark.parametrize("reply", [
    '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',  # not a tool
    '<tool_call>\n{"name": "ping", "arguments": {"a": 1}}\n</tool_call>',  # zero-arg tool takes {}
    '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>',  # missing required
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',  # enum
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 8}}\n</tool_call>',  # maximum
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "kelv"}}\n</tool_call>',
    '<tool_call>\n{"arguments": {}, "name": "ping"}\n</tool_call>',  # envelope order is fixed
    '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\n',  # trailing text
    'Sure <tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>',  # leading content
    '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call><tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>',
])
def test_forced_language_rejects(reply):
    spec = tool_call_spec(TOOLS, parallel=True)
    assert not _dfa_matches(spec, reply)
    assert not re.fullmatch(tool_call_regex(spec), reply)


@pytest.mark.parametrize("parameters", [None, {}, {"type": "object"}, {"type": "object", "properties": {}, "title": "x"}])
def test_empty_parameters_force_exactly_the_empty_object(parameters):
    spec = tool_call_spec([("noop", parameters)], parallel=False)
    assert _dfa_matches(spec, '<tool_call>\n{"name": "noop", "arguments": {}}\n</tool_call>')
    assert not _dfa_matches(spec, '<tool_call>\n{"name": "noop", "arguments": {"a": 1}}\n</tool_call>')
    if parameters is not None:
        jsonschema.validate({}, parameters)


def test_names_are_escaped_literally():
    spec = tool_call_spec([("a.b", None), ("é|x", None)], parallel=False)
    assert _dfa_matches(spec, '<tool_call>\n{"name": "é|x", "arguments": {}}\n</tool_call>')
    assert not _dfa_matches(spec, '<tool_call>\n{"name": "aXb", "arguments": {}}\n</tool_call>')


def test_tool_regex_is_not_bound_by_the_user_regex_limit_but_by_the_schema_regex_limit():
    spec = tool_call_spec(TOOLS, parallel=True)
    assert len(tool_call_regex(spec)) > 200
    compile_tool_call_constraint(spec, Limits(max_regex_bytes=64))  # no error
    with pytest.raises(LimitExceeded, match="max_schema_regex_bytes"):
        compile_tool_call_constraint(spec, Limits(max_schema_regex_bytes=200))
    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        compile_tool_call_constraint(spec, Limits(max_automaton_bytes=2000))


def test_unsupported_schema_names_the_tool():
    spec = tool_call_spec([("bad", {"type": "string", "pattern": "(a)\\1"})], parallel=False)
    with pytest.raises(PootError, match="'bad'"):
        compile_tool_call_constraint(spec)


# --- markers never inside the arguments (vLLM's hermes parser finds them by text) -----
#: A tool whose arguments can hold "<" everywhere poot spells strings: free text,
#: a pattern, enum/const values (the markers themselves), listed and free keys.
MARKUP = {"type": "object", "properties": {
    "text": {"type": "string"},
    "html": {"type": "string", "pattern": "^<[a-z/]{1,12}>$"},
    "tag": {"enum": ["</tool_call>", "<tool_call>", "a<b", 7]},
    "fixed": {"const": {"<k>": ["</tool_call>"]}},
    "<key>": {"type": "string", "maxLength": 2},
    "free": {"type": "object", "additionalProperties": {"type": ["string", "array"], "items": {"type": "string"}}},
}, "required": ["text", "html", "tag", "<key>"], "additionalProperties": False}
MARKUP_TOOLS = [("markup", MARKUP), ("ping", None)]
_HEAD = '<tool_call>\n{"name": "markup", "arguments": {"\\u003ckey>": "", "fixed": {"\\u003ck>": ["\\u003c/tool_call>"]}, '


def _dead_end_distances(dfa) -> np.ndarray:
    """Fewest bytes from each state to acceptance (BFS over reversed edges)."""
    n = dfa.n_states
    dist = np.full(n, 10**9, dtype=np.int64)
    src, _ = np.nonzero(dfa.transitions >= 0)
    dst = dfa.transitions[src, _]
    preds: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        preds[b].append(a)
    frontier = [int(s) for s in np.nonzero(dfa.accepting)[0]]
    dist[frontier] = 0
    while frontier:
        nxt = []
        for t in frontier:
            for a in preds[t]:
                if dist[a] > dist[t] + 1:
                    dist[a] = dist[t] + 1
                    nxt.append(a)
        frontier = nxt
    return dist


def _sample(dfa, rnd: random.Random, soft_len: int) -> bytes:
    """A random reply of the DFA: uniform over live next bytes, then the shortest way home after soft_len."""
    dist = _dead_end_distances(dfa)
    state, out = dfa.start, bytearray()
    while True:
        live = np.nonzero(dfa.transitions[state] >= 0)[0]
        if dfa.accepting[state] and (len(out) >= soft_len or rnd.random() < 0.05 or not len(live)):
            return bytes(out)
        if len(out) >= soft_len:
            live = [b for b in live if dist[dfa.transitions[state, b]] < dist[state]]
        b = int(rnd.choice(list(live)))
        out.append(b)
        state = int(dfa.transitions[state, b])


@pytest.fixture(scope="module")
def vllm_hermes(tiny_models_dir):
    """vLLM's own hermes tool parser on the tiny Qwen2 tokenizer."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-qwen2-bpe"))
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tool_choice="required",
                                    tools=[{"type": "function", "function": {"name": n, "parameters": p or {}}}
                                           for n, p in MARKUP_TOOLS])
    return lambda: Hermes2ProToolParser(tokenizer, request.tools), request, tokenizer


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), soft_len=st.integers(60, 400), cuts=st.lists(st.integers(0, 10**4), max_size=30))
def test_sampled_forced_replies_parse_back_through_vllms_hermes_parser(vllm_hermes, seed, soft_len, cuts):
    make_parser, request, _ = vllm_hermes
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=True)))
    reply = _sample(dfa, random.Random(seed), soft_len).decode("utf-8")
    expected = [canonical(c) for c in HERMES_TEXT.parse(reply).calls]  # reads JSON strings properly
    assert expected and reply.count("<") == 2 * len(expected)  # "<" only in the markers
    for name, args in expected:
        if name == "markup":
            jsonschema.validate(args, MARKUP)

    info = make_parser().extract_tool_calls(reply, request)
    assert info.tools_called and not info.content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == expected

    parser, previous, names, args = make_parser(), "", {}, {}
    bounds = sorted({0, len(reply), *(c % (len(reply) + 1) for c in cuts)})
    for a, b in zip(bounds, bounds[1:]):
        delta = parser.extract_tool_calls_streaming(previous, reply[:b], reply[a:b], [], [], [], request)
        previous = reply[:b]
        assert not (delta and delta.content), delta
        for tc in (delta.tool_calls if delta else None) or []:
            if tc.function and tc.function.name:
                names[tc.index] = tc.function.name
            args[tc.index] = args.get(tc.index, "") + ((tc.function.arguments or "") if tc.function else "")
    assert [(names[i], json.loads(args[i])) for i in sorted(names)] == expected


@pytest.mark.parametrize("parallel", [False, True])
@settings(max_examples=40, deadline=None)
@given(inside=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10))
def test_the_end_marker_cannot_be_written_inside_a_free_text_argument(parallel, inside):
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=parallel)))
    prefix = (_HEAD + '"free": {}, "html": "\\u003ca>", "tag": 7, "text": "').encode()
    state = dfa.step(dfa.start, prefix + json.dumps(inside, ensure_ascii=False)[1:-1].replace("<", "\\u003c").encode())
    assert state >= 0
    for markup in (b"</tool_call>", b"<tool_call>", b"<"):
        assert dfa.step(state, markup) < 0
    closing = b'\\u003c/tool_call>"}}\n</tool_call>'
    end = dfa.step(state, closing)
    assert end >= 0 and dfa.accepting[end]
    parsed = HERMES_TEXT.parse((prefix + closing).decode())
    assert json.loads(parsed.calls[0].arguments)["text"] == "</tool_call>"


def test_marker_tokens_are_masked_inside_strings_in_a_real_vocabulary(tiny_models_dir):
    from transformers import AutoTokenizer

    from poot_vllm.core.masks import DFAMaskIndex
    from poot_vllm.core.vocabulary import TokenVocabulary

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-qwen2-bpe"))
    vocab = TokenVocabulary.from_tokenizer(tokenizer, stop_ids=[tokenizer.eos_token_id])
    start_id, end_id = tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    assert vocab.token_bytes[end_id] == b"</tool_call>" and vocab.token_bytes[start_id] == b"<tool_call>"
    with_lt = [t for t in range(vocab.size) if vocab.token_bytes[t] and b"<" in vocab.token_bytes[t]]
    backslash = vocab.token_bytes.index(b"\\")
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=True)))
    index = DFAMaskIndex.build(dfa, vocab)

    def allowed(state: int, token: int) -> bool:
        return bool((int(index.row(state)[token >> 5]) >> (token & 31)) & 1)

    inside = [dfa.step(dfa.start, (_HEAD + '"free": {"').encode()),  # a free-form key
              dfa.step(dfa.start, (_HEAD + '"free": {}, "html": "').encode()),  # a pattern string
              dfa.step(dfa.start, (_HEAD + '"free": {}, "html": "\\u003ca>", "tag": 7, "text": "x').encode())]
    for state in inside:
        assert state >= 0 and not any(allowed(state, t) for t in with_lt)
        assert allowed(state, backslash)  # "<" is still there: spelled \u003c
    end = dfa.step(dfa.start, b'<tool_call>\n{"name": "ping", "arguments": {}}\n')
    assert allowed(end, end_id)
    again = dfa.step(dfa.start, b'<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\n')
    assert allowed(again, start_id) and allowed(dfa.start, start_id)


def test_a_tool_name_holding_a_marker_is_refused():
    for name in ("a</tool_call>b", "<tool_call>"):
        with pytest.raises(PootError, match="cannot contain"):
            compile_tool_call_constraint(tool_call_spec([(name, None)], parallel=False))


# --- parallel calls: one copy of the call, looped --------------------------------------
_atoms = st.sampled_from(["a", "b", "\n", "ab", "a\n"])
_small_regex = st.recursive(_atoms, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
    st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
    inner.map(lambda r: f"(?:{r})?"),
    inner.map(lambda r: f"(?:{r})*")), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(x=_small_regex, sep=st.sampled_from(["\n", "b", "ab", "\n\n", "ba"]))
def test_looped_dfa_is_the_minimal_dfa_of_the_repeated_regex(x, sep):
    from poot_vllm.core.automata.build import Budget, regex_tree_to_dfa
    from poot_vllm.core.regex.parser import parse

    big = Limits(max_automaton_bytes=10**8)
    looped = repeat_with_separator(regex_tree_to_dfa(parse(x), Budget(10**8)), sep.encode(), Budget(10**8))
    reference = regex_to_dfa(f"(?:{x})(?:{regex_escape(sep)}(?:{x}))*", big)
    # minimal DFAs are numbered canonically: equal languages give identical tables
    assert np.array_equal(looped.transitions, reference.transitions)
    assert np.array_equal(looped.accepting, reference.accepting)


@pytest.mark.parametrize("tools", [TOOLS, MARKUP_TOOLS], ids=["weather", "markup"])
def test_parallel_tool_call_dfa_equals_the_dfa_of_the_written_out_regex(tools):
    big = Limits(max_automaton_bytes=10**8)
    spec = tool_call_spec(tools, parallel=True)
    looped = compile_tool_call_constraint(spec, big)
    reference = regex_to_dfa(tool_call_regex(spec, big), big)
    assert np.array_equal(looped.transitions, reference.transitions)
    assert np.array_equal(looped.accepting, reference.accepting)


# --- request -> constraint ------------------------------------------------------
def _request(tool_choice, tools=TOOLS, parallel=True, **extra):
    return SimpleNamespace(
        tool_choice=tool_choice, parallel_tool_calls=parallel,
        tools=[{"type": "function", "function": {"name": n, "parameters": p}} for n, p in tools], **extra)


def test_required_and_named_become_a_tool_call_constraint():
    constraint, field = tool_constraint_for(_request("required"), Limits(), codec=HERMES)
    assert constraint.kind is Kind.TOOL_CALL and field == "tools"
    check(constraint)
    named, _ = tool_constraint_for(_request({"type": "function", "function": {"name": "ping"}}), Limits(), codec=HERMES)
    dfa = compile_automaton(named)
    assert dfa.matches(b'<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')
    assert not dfa.matches(HERMES_TEXT.encode([ToolCall.of("get_weather", {"city": "Oslo"})]).encode())


@pytest.mark.parametrize("parallel", [True, False, None])
def test_named_tool_choice_forces_exactly_one_call_whatever_parallel_says(parallel):
    named, _ = tool_constraint_for(_request({"type": "function", "function": {"name": "ping"}}, parallel=parallel),
                                   Limits(), codec=HERMES)
    dfa = compile_automaton(named)
    one = HERMES_TEXT.encode([ToolCall.of("ping", {})])
    assert dfa.matches(one.encode())
    assert not dfa.matches(HERMES_TEXT.encode([ToolCall.of("ping", {})] * 2).encode())


@pytest.mark.parametrize("parallel", [True, None])
def test_required_allows_several_calls_unless_parallel_is_false(parallel):
    constraint, _ = tool_constraint_for(_request("required", parallel=parallel), Limits(), codec=HERMES)
    calls = [ToolCall.of("ping", {}), _ordered(ToolCall.of("get_weather", {"city": "Oslo", "days": 2})),
             ToolCall.of("ping", {})]
    assert compile_automaton(constraint).matches(HERMES_TEXT.encode(calls).encode())


def test_parallel_false_allows_exactly_one_call():
    constraint, _ = tool_constraint_for(_request("required", parallel=False), Limits(), codec=HERMES)
    dfa = compile_automaton(constraint)
    one = HERMES_TEXT.encode([ToolCall.of("ping", {})])
    assert dfa.matches(one.encode()) and not dfa.matches(HERMES_TEXT.encode([ToolCall.of("ping", {})] * 2).encode())


@pytest.mark.parametrize("choice", [None, "auto", "none"])
def test_auto_none_and_omitted_force_nothing(choice):
    assert tool_constraint_for(_request(choice, guided_json={"type": "string"}), Limits(), codec=HERMES) is None


@pytest.mark.parametrize("name", ["mistral", "llama3"])
def test_mistral_and_llama3_are_forced_in_their_own_format(name):
    constraint, field = tool_constraint_for(_request("required"), Limits(), codec=get_codec(name))
    assert field == "tools" and json.loads(constraint.spec)["codec"] == name


def test_a_parser_poot_does_not_know_forces_nothing():
    assert tool_constraint_for(_request("required"), Limits(), codec=None) is None


@pytest.mark.parametrize("request_,needle", [
    (_request({"type": "function", "function": {"name": "nope"}}), "'nope'"),
    (_request("required", tools=[]), "no tools"),
])
def test_impossible_tool_choice_is_a_400_naming_tool_choice(request_, needle):
    with pytest.raises(PootError) as info:
        tool_constraint_for(request_, Limits(), codec=HERMES)
    assert info.value.field == "tool_choice" and needle in str(info.value)


# --- codec selection ------------------------------------------------------------
@pytest.mark.parametrize("template,model_type,expected", [
    ("... <tool_call> ...", "llama", "hermes"),
    ("{{ '[TOOL_CALLS]' }}", None, "mistral"),
    ("{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}", "mistral", "mistral_v11"),
    ("{{- '<|python_tag|>' }}", "llama", "llama3"),
    (None, "qwen2", "hermes"),
    (None, "mixtral", "mistral"),
    ("{{ messages }}", "llama", None),
])
def test_codec_from_template_markers_then_model_type(monkeypatch, template, model_type, expected):
    monkeypatch.delenv("POOT_TOOL_CODEC", raising=False)
    codec = codec_for(template, model_type)
    assert (codec.name if codec else None) == expected


def test_override_env_wins(monkeypatch):
    monkeypatch.setenv("POOT_TOOL_CODEC", "mistral")
    assert codec_for("<tool_call>", "qwen2").name == "mistral"
    monkeypatch.setenv("POOT_TOOL_CODEC", "none")
    assert codec_for("<tool_call>", "qwen2") is None


def test_tool_parser_choice_cli(tmp_path, monkeypatch, capsys):
    from poot_vllm.adapter.tool_parser_choice import main

    monkeypatch.delenv("POOT_TOOL_CODEC", raising=False)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert main([str(tmp_path)]) == 1
    (tmp_path / "chat_template.jinja").write_text("{{ '<tool_call>' }}")
    assert main([str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == "hermes"
    (tmp_path / "chat_template.jinja").write_text("{{ '[TOOL_CALLS]' }}")
    assert main([str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == "mistral"
    (tmp_path / "chat_template.jinja").write_text("{{- '<|python_tag|>' }}")
    assert main([str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == "llama3_json"
    (tmp_path / "chat_template.jinja").write_text("{{ '[TOOL_CALLS]' + name + '[ARGS]' }}")  # v11+: not forced
    assert main([str(tmp_path)]) == 1 and "mistral_v11" in capsys.readouterr().err


def test_mistral_server_codec_follows_the_vocabulary_then_the_template(tiny_models_dir, monkeypatch):
    """vLLM's mistral parser reads the bare array poot forces only when the vocabulary
    has no ``[ARGS]`` (its pre-v11 path); with ``[ARGS]`` poot does not force."""
    from poot_vllm.adapter.tool_forcing import forcing_codec, record_tool_parser
    from poot_vllm.core.tool_calls import codec_for_parser
    from poot_vllm.core.tool_calls.selection import record_server_codec, server_codec

    monkeypatch.delenv("POOT_TOOL_CODEC", raising=False)

    v3 = (tiny_models_dir / "tiny-mistral-spm" / "chat_template.jinja").read_text()
    v11 = "{{ '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}"
    assert codec_for_parser("mistral", v3).name == "mistral"
    assert codec_for_parser("mistral", v11).name == "mistral_v11"
    assert codec_for_parser("mistral", v3, {"[TOOL_CALLS]": 5, "[ARGS]": 32}).name == "mistral_v11"
    assert codec_for_parser("mistral", v11, {"[TOOL_CALLS]": 5}).name == "mistral"  # the vocabulary decides
    assert codec_for_parser("hermes", v11, {"[ARGS]": 32}).name == "hermes"
    v11_codec = codec_for_parser("mistral", v11)
    assert not v11_codec.can_force and v11_codec.vllm_parser == "mistral" and forcing_codec(v11_codec) is None
    assert tool_constraint_for(_request("required"), Limits(), codec=v11_codec) is None
    # The server records the codec from its tokenizer's vocabulary (API server, at start).
    before = server_codec()
    try:
        for vocabulary, expected in (({"[TOOL_CALLS]": 5, "[ARGS]": 32}, "mistral_v11"), ({"[TOOL_CALLS]": 5}, "mistral")):
            record_tool_parser("mistral", True, SimpleNamespace(chat_template=v3, get_vocab=lambda v=vocabulary: v))
            assert server_codec().name == expected
    finally:
        record_server_codec(before)


def test_vllms_mistral_parser_reads_the_bare_array_only_without_args_in_the_vocabulary(tiny_models_dir):
    """Why ``mistral_v11`` is not forced: the same forced reply, read by vLLM's mistral
    parser on Mistral's v3 tokenizer, and on the same tokenizer with ``[ARGS]`` added."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.mistral_tool_parser import MistralToolParser

    reply = '[{"name": "ping", "arguments":{}}]'
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tool_choice="required",
                                    tools=[{"type": "function", "function": {"name": "ping", "parameters": {}}}])
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-mistral-spm"))
    info = MistralToolParser(tokenizer, request.tools).extract_tool_calls(reply, request)
    assert [c.function.name for c in info.tool_calls] == ["ping"]
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ARGS]"]})
    info = MistralToolParser(tokenizer, request.tools).extract_tool_calls(reply, request)
    assert not info.tools_called and info.content == reply


# --- the response hook against vLLM's real parser classes -------------------------
@pytest.fixture
def hermes_parser_cls(monkeypatch, tiny_models_dir):
    """vLLM's DelegatingParser over a hermes parser that *would* read required/named as bare JSON
    (what VLLM_ENFORCE_STRICT_TOOL_CALLING=0 gives), on a poot server forcing the hermes codec."""
    from transformers import AutoTokenizer
    from vllm.parser.abstract_parser import DelegatingParser
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    from poot_vllm.adapter.patches import apply_all
    from poot_vllm.core.tool_calls import selection

    model = tiny_models_dir / "tiny-qwen2-bpe"
    apply_all(eager=True)

    class JsonReadingHermes(Hermes2ProToolParser):
        pass

    JsonReadingHermes.supports_required_and_named = True  # after __init_subclass__ (strict mode turns it off)

    class Parser(DelegatingParser):
        tool_parser_cls = JsonReadingHermes

    monkeypatch.setenv("POOT_SERVER_BACKEND", "poot")
    monkeypatch.delenv("POOT_TOOL_CODEC", raising=False)
    monkeypatch.setattr(selection, "_server_codec", HERMES)
    return Parser, AutoTokenizer.from_pretrained(str(model))


def _chat_request(tool_choice):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], tool_choice=tool_choice,
        tools=[{"type": "function", "function": {"name": n, "parameters": p or {}}} for n, p in TOOLS])


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_reply_is_read_in_the_parsers_own_format(hermes_parser_cls, monkeypatch, tool_choice):
    parser_cls, tokenizer = hermes_parser_cls
    request = _chat_request(tool_choice)
    calls = [ToolCall.of("get_weather", {"city": "Oslo", "where": {"lat": -3}})]
    reply = HERMES_TEXT.encode(calls)
    _, content, parsed = parser_cls(tokenizer, request.tools).parse(reply, request, enable_auto_tools=True)
    assert [canonical(c) for c in parsed] == [canonical(c) for c in calls] and not content

    stream_parser = parser_cls(tokenizer, request.tools)
    args, names = "", []
    for i in range(0, len(reply), 5):
        delta = stream_parser.parse_delta(reply[i:i + 5], [], request, prompt_token_ids=[1],
                                             finished=i + 5 >= len(reply))
        for tc in (delta.tool_calls if delta else None) or []:
            names += [tc.function.name] if tc.function and tc.function.name else []
            args += (tc.function.arguments or "") if tc.function else ""
        assert not (delta and delta.content), delta
    assert names == ["get_weather"] and json.loads(args) == json.loads(calls[0].arguments)

    # Without poot forcing, vLLM reads the same text as bare JSON and gets no call out of the markup.
    monkeypatch.setenv("POOT_SERVER_BACKEND", "xgrammar")
    _, _, unforced = parser_cls(tokenizer, request.tools).parse(reply, request, enable_auto_tools=True)
    def readable(call):
        try:
            return canonical(call)
        except ValueError:  # named: vLLM takes the whole markup as the arguments
            return None

    assert [readable(c) for c in unforced or []] != [canonical(c) for c in calls]


# --- Mistral and Llama 3: forced in the format their vLLM parser reads -----------------
@pytest.fixture(scope="module")
def family_parsers(tiny_models_dir):
    """vLLM's mistral and llama3_json tool parsers; they need their marker token in the
    vocabulary, so the tiny Qwen2 tokenizer gets them as added special tokens."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.llama_tool_parser import Llama3JsonToolParser
    from vllm.tool_parsers.mistral_tool_parser import MistralToolParser

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_models_dir / "tiny-qwen2-bpe"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|python_tag|>", "[TOOL_CALLS]"]})
    tools = [{"type": "function", "function": {"name": n, "parameters": p or {}}} for n, p in MARKUP_TOOLS]

    def request(tool_choice):
        return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                     tool_choice=tool_choice, tools=tools)

    classes = {"mistral": MistralToolParser, "llama3": Llama3JsonToolParser}
    return lambda name, tool_choice: (classes[name](tokenizer, request(tool_choice).tools), request(tool_choice))


@pytest.mark.parametrize("name", ["mistral", "llama3"])
@pytest.mark.parametrize("parallel", [False, True])
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), soft_len=st.integers(30, 300))
def test_sampled_forced_replies_parse_back_through_the_familys_vllm_parser(family_parsers, name, parallel, seed,
                                                                            soft_len):
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=parallel, codec=name)))
    reply = _sample(dfa, random.Random(seed), soft_len).decode("utf-8")
    # An independent read of the forced text: the envelope, then each call's JSON, in order.
    codec = get_codec(name)
    assert reply.startswith(codec.prefix) and reply.endswith(codec.suffix)
    body, expected = reply[len(codec.prefix):len(reply) - len(codec.suffix)], []
    decoder = json.JSONDecoder()
    while True:
        obj, end = decoder.raw_decode(body)
        assert list(obj)[0] == "name"  # the streaming parsers need the name first
        expected.append((obj["name"], obj["arguments" if name == "mistral" else "parameters"]))
        body = body[end:]
        if not body:
            break
        assert body.startswith(codec.separator) and parallel
        body = body[len(codec.separator):]
    for tool, args in expected:
        if tool == "markup":
            jsonschema.validate(args, MARKUP)
        else:
            assert args == {}

    tool_choice = "required" if parallel else {"type": "function", "function": {"name": expected[0][0]}}
    parser, request = family_parsers(name, tool_choice)
    info = parser.extract_tool_calls(reply, request)
    assert info.tools_called and not info.content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == expected


@given(inside=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10))
@settings(max_examples=40, deadline=None)
def test_mistral_arguments_cannot_spell_its_marker(inside):
    """vLLM's mistral parser splits the reply at the text ``[TOOL_CALLS]``: a string inside the
    arguments may hold every character, but ``_`` only as ``\\u005f``."""
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=True, codec="mistral")))
    head = '[{"name": "markup", "arguments":{"<key>":"","html":"<a>","tag":7,"text":"'
    state = dfa.step(dfa.start, (head + json.dumps(inside, ensure_ascii=False)[1:-1].replace("_", "\\u005f")).encode())
    assert state >= 0
    assert dfa.step(state, b"[TOOL_CALLS]") < 0 and dfa.step(state, b"_") < 0
    end = dfa.step(state, b'\\u005b\\u005fTOOL\\u005fCALLS]"}}]')
    assert end >= 0 and dfa.accepting[end]


@pytest.mark.parametrize("name", ["mistral", "llama3"])
def test_looped_and_wrapped_dfa_is_the_minimal_dfa_of_the_written_out_regex(name):
    for parallel in (False, True):
        spec = tool_call_spec(MARKUP_TOOLS, parallel=parallel, codec=name)
        built = compile_tool_call_constraint(spec)
        reference = regex_to_dfa(tool_call_regex(spec), Limits(max_automaton_bytes=1 << 30))
        assert np.array_equal(built.transitions, reference.transitions)
        assert np.array_equal(built.accepting, reference.accepting)


def _stream_through(parser, request, pieces: list[str]) -> tuple[list[tuple[str, str]], str]:
    """Feed ``pieces`` to a vLLM tool parser as streaming deltas; the assembled (name, arguments) and content."""
    calls, content, previous = {}, "", ""
    for delta in pieces:
        message = parser.extract_tool_calls_streaming(previous, previous + delta, delta, [], [], [], request)
        previous += delta
        if message is None:
            continue
        content += message.content or ""
        for tc in message.tool_calls or []:
            call = calls.setdefault(tc.index, ["", ""])
            call[0] += (tc.function.name or "") if tc.function else ""
            call[1] += (tc.function.arguments or "") if tc.function else ""
    return [tuple(calls[i]) for i in sorted(calls)], content


def test_mistral_streaming_reads_a_forced_reply_cut_anywhere_but_after_the_arguments_key(family_parsers):
    """vLLM's mistral streaming parser on a forced reply cut in two at every position.

    Every cut gives the exact calls, but one: a cut right after ``"arguments"``
    (the next delta starting ``:{``) puts that ``:`` at the start of the call's
    arguments.  That is vLLM 0.32's parser
    (``MistralParser._extract_tool_calls_streaming_pre_v11_tokenizer``: ijson
    reports the key at its closing quote; in ``WAITING_FOR_ARGUMENTS_START`` the
    delta is passed on up to ``{`` and then used as the arguments' first chunk,
    only whitespace stripped), on any text with a ``:`` before the arguments.
    The e2e test (tests/e2e/test_tools_mistral.py) allows that one artefact
    and nothing else; this test fails if another cut goes wrong.
    """
    codec = get_codec("mistral")
    calls = [("markup", {"<key>": "", "html": "<a>", "tag": 7, "text": "a_b {x}: [y]"}), ("ping", {})]
    reply = codec.prefix + codec.separator.join(
        codec.call_head(name) + json.dumps(args, ensure_ascii=False).replace("_", "\\u005f") + codec.call_tail
        for name, args in calls
    ) + codec.suffix
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, tool_call_spec(MARKUP_TOOLS, parallel=True, codec="mistral")))
    state = dfa.step(dfa.start, reply.encode())
    assert state >= 0 and dfa.accepting[state], reply  # the reply is one poot forces
    key_ends = [m.end() for m in re.finditer(re.escape('"arguments"'), reply)]
    for cut in range(1, len(reply)):
        parser, request = family_parsers("mistral", "required")
        got, content = _stream_through(parser, request, [reply[:cut], reply[cut:]])
        assert not content and [name for name, _ in got] == [name for name, _ in calls], (cut, got, content)
        for (name, arguments), (_, expected) in zip(got, calls):
            if arguments.startswith(":"):
                assert cut in key_ends, (cut, reply[:cut], got)
                arguments = arguments[1:]
            assert json.loads(arguments) == expected, (cut, reply[:cut], got)
    # One character a delta: the ":" comes alone, so even that cut is read exactly.
    parser, request = family_parsers("mistral", "required")
    got, content = _stream_through(parser, request, list(reply))
    assert not content and [(name, json.loads(arguments)) for name, arguments in got] == calls


def test_a_mistral_tool_name_holding_its_marker_is_refused():
    with pytest.raises(PootError, match="TOOL_CALLS"):
        compile_tool_call_constraint(tool_call_spec([("x[TOOL_CALLS]", None)], parallel=False, codec="mistral"))


# A recursive tool (a category tree): unrolled like a response_format schema, forced with parallel calls.
CATEGORY = {"$defs": {"Cat": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
    "name": {"type": "string", "maxLength": 6},
    "sub": {"type": "array", "items": {"$ref": "#/$defs/Cat"}, "maxItems": 3}}}},
    "type": "object", "required": ["root"], "additionalProperties": False,
    "properties": {"root": {"$ref": "#/$defs/Cat"}}}


def _depth(cat: dict) -> int:
    return 1 + max((_depth(c) for c in cat.get("sub", [])), default=0)


def _nested(depth: int) -> str:
    cat = '{"name": "c"}'
    for k in range(depth - 1):
        cat = '{"name": "n' + str(k) + '", "sub": [' + cat + ', {"name": "x"}]}'
    return '{"root": ' + cat + '}'


def test_a_recursive_tool_is_forced_exactly_at_any_depth_and_every_sampled_call_validates():
    # a recursive tool is a grammar (exact at any depth, as for response_format), not an unrolled DFA
    from tests.unit.test_json_recursive import accepts, replies

    spec = tool_call_spec([("categorize", CATEGORY), ("ping", {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"]})], parallel=True)
    grammar = compile_automaton(Constraint(Kind.TOOL_CALL, spec))
    assert isinstance(grammar, Grammar)
    deepest, names = 0, set()
    for reply in replies(grammar, 40, seed=5, budget=300):
        calls = HERMES_TEXT.parse(reply).calls
        assert calls, reply
        for call in calls:
            args = json.loads(call.arguments)
            names.add(call.name)
            if call.name == "categorize":
                jsonschema.validate(args, CATEGORY)
                deepest = max(deepest, _depth(args["root"]))
            else:
                assert call.name == "ping" and 0 <= args["n"] <= 9 and set(args) == {"n"}
    assert names == {"categorize", "ping"} and deepest >= 2

    def call(arguments: str, name: str = "categorize") -> str:
        return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'

    # deeper than any unrolled depth (RECURSION_DEPTHS), parallel calls of both tools
    deep = _nested(max(RECURSION_DEPTHS) + 6)
    jsonschema.validate(json.loads(deep), CATEGORY)
    assert accepts(grammar, call(deep))
    assert accepts(grammar, call(_nested(2)) + "\n" + call('{"n": 3}', "ping") + "\n" + call(deep))
    # not the schema's: too many items, a long name, an unknown key, a wrong tool's arguments
    for bad in (_nested(2).replace('{"name": "x"}', '{"name": "x"}, {"name": "y"}, {"name": "z"}'),
                _nested(3).replace('"c"', '"abcdefg"'), _nested(2).replace('"root"', '"rot"')):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(bad), CATEGORY)
        assert not accepts(grammar, call(bad))
    assert not accepts(grammar, call('{"n": 3}'))
    # the codec's escape holds inside the recursion: "<" only as \u003c, so no marker can cut the call
    assert not accepts(grammar, call(_nested(3).replace('"c"', '"<c"')))
    assert accepts(grammar, call(_nested(3).replace('"c"', '"\\u003cc"')))


def test_a_recursive_tool_whose_schema_cannot_be_a_grammar_is_unrolled():
    # a negated recursive reference (json_schema.recursive: the rule would have to be
    # negated): the call takes the unrolled DFA, exact up to its depth, as response_format does
    from poot_vllm.core.automata.dfa import DFA

    negated = {"$defs": {"N": {"type": "object", "required": ["v"], "additionalProperties": False,
                               "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                              "n": {"not": {"$ref": "#/$defs/N"}}}}}, "$ref": "#/$defs/N"}
    spec = tool_call_spec([("f", negated)], parallel=False)
    dfa = compile_automaton(Constraint(Kind.TOOL_CALL, spec))
    assert isinstance(dfa, DFA)
    assert dfa.matches(b'<tool_call>\n{"name": "f", "arguments": {"n":1,"v":2}}\n</tool_call>')
    assert not dfa.matches(b'<tool_call>\n{"name": "f", "arguments": {"n":{"v":1},"v":2}}\n</tool_call>')


def test_a_tool_with_many_free_form_fields_is_forced_as_a_grammar():
    # eight optional free-form fields: the call's DFA passes the budget even 1 container deep;
    # as for response_format, the free-form value is one rule (exact at any depth), and the
    # codec's escape ("<" only as \u003c) holds inside it
    from tests.unit.test_json_recursive import WIDE_ANY, accepts, replies

    spec = tool_call_spec([("record", WIDE_ANY), ("ping", {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"]})], parallel=True)
    grammar = compile_automaton(Constraint(Kind.TOOL_CALL, spec))
    assert isinstance(grammar, Grammar)
    names = set()
    for reply in replies(grammar, 30, seed=2, budget=300, own=False):
        calls = HERMES_TEXT.parse(reply).calls
        assert calls, reply
        for call in calls:
            names.add(call.name)
            args = json.loads(call.arguments)
            jsonschema.validate(args, WIDE_ANY if call.name == "record" else {"required": ["n"]})
    assert names == {"record", "ping"}

    def call(arguments: str, name: str = "record") -> str:
        return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'

    deep = "[" * 6 + "1" + "]" * 6
    assert accepts(grammar, call('{"name": "a", "x1": ' + deep + '}') + "\n" + call('{"n": 3}', "ping"))
    assert not accepts(grammar, call('{"x1": 1}'))  # 'name' is required
    assert not accepts(grammar, call('{"name": "a", "x1": "<b"}'))
    assert accepts(grammar, call('{"name": "a", "x1": "\\u003cb"}'))


def test_a_tool_with_many_string_fields_is_forced_as_a_grammar():
    # eighty optional string fields (a SAML-style config): the call's DFA holds a copy of the
    # string per field and passes the budget; as for response_format, each string value is one
    # rule, and the codec's escape ("<" only as \u003c) holds inside it
    from tests.unit.test_json_recursive import WIDE_STRINGS, accepts, replies

    spec = tool_call_spec([("configure", WIDE_STRINGS)], parallel=True)
    from poot_vllm.core.tool_calls.forcing import tool_call_grammar

    assert tool_call_grammar(spec, free_form_rule=True) is None  # no free-form value: that fallback alone is none
    grammar = compile_automaton(Constraint(Kind.TOOL_CALL, spec))
    assert isinstance(grammar, Grammar)
    for reply in replies(grammar, 12, seed=4, budget=400, own=False):
        calls = HERMES_TEXT.parse(reply).calls
        assert calls, reply
        for call in calls:
            assert call.name == "configure"
            jsonschema.validate(json.loads(call.arguments), WIDE_STRINGS)

    def call(arguments: str) -> str:
        return f'<tool_call>\n{{"name": "configure", "arguments": {arguments}}}\n</tool_call>'

    assert accepts(grammar, call('{"attribute1": "a", "attribute1format": "URI"}') + "\n" + call('{}'))
    assert not accepts(grammar, call('{"attribute1": "<b"}'))
    assert accepts(grammar, call('{"attribute1": "\\u003cb"}'))
    assert not accepts(grammar, call('{"attribute1format": "Other"}'))
