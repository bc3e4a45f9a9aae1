"""Recursive JSON Schemas as grammars (core/json_schema/recursive.py): exact at every depth.

Oracles: the unrolled DFA of the same schema (the schema compiler's regular
path, itself tested against jsonschema and Python's ``re``) agrees with the
grammar on every text up to the depth it unrolls; ``jsonschema`` and the
Pydantic models themselves validate random replies of any depth, drawn from
poot's own grammar masks.
"""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poot_vllm.core.automata.compilers import regex_to_dfa
from poot_vllm.core.automata.dfa import DFA
from poot_vllm.core.errors import UnsupportedConstruct
from poot_vllm.core.grammar.gbnf import ByteAutomaton, Grammar, Literal, Repeat, Rule, RuleRef, Sequence
from poot_vllm.core.grammar.rule_automata import Configurations, rule_automata
from poot_vllm.core.json_schema import RECURSION_DEPTHS, compile_json_schema, schema_to_regex
from poot_vllm.core.limits import Limits
from poot_vllm.core.matchers.pushdown import compile_pushdown
from poot_vllm.core.matchers.rules import RuleMatcher

from poot_vllm.core.vocabulary import TokenVocabulary

from tests.unit.mask_helpers import allowed_set

#: each byte a token, plus a few longer ones; stop id 260
_TOKENS = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'},', b'[]']
BYTE_VOCAB = TokenVocabulary(tuple(_TOKENS) + (None,), frozenset({len(_TOKENS)}), len(_TOKENS) + 1, "raw")
_BIG = Limits(max_automaton_bytes=64 * 1024 * 1024)

TREE = {"$defs": {"Node": {"type": "object", "required": ["v"], "additionalProperties": False, "properties": {
    "v": {"type": "integer", "minimum": 0, "maximum": 9},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}, "$ref": "#/$defs/Node"}
LINKED = {"type": "object", "required": ["v"], "properties": {"v": {"type": "boolean"}, "next": {"$ref": "#"}}}
#: lookaheads inside the recursion: ``pattern`` with ``maxLength`` (non-ASCII members: 2-, 3- and 4-byte
#: UTF-8; two variable parts, so the length is a lookahead, not folded into the pattern) and
#: ``patternProperties`` keys, each embedded in its rule as a byte automaton
NAMED = {"$defs": {"Node": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
    "name": {"type": "string", "pattern": "^[a-z\u00e9]*[a-z\u20ac\U0001d11e]+$", "maxLength": 4},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}, "$ref": "#/$defs/Node"}
KEYED = {"type": "object", "patternProperties": {"^[a-z]+$": {"$ref": "#"}}, "additionalProperties": False}


def _tree(depth: int) -> str:
    text = '{"v":1}'
    for _ in range(depth - 1):
        text = '{"kids":[' + text + ',{"v":2}],"v":3}'
    return text


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether the grammar's model reads ``text`` to a finished sentence."""
    c = Configurations(rule_automata(grammar))
    configs = c.advance(c.initial(), text.encode())
    return bool(configs) and min(c.cost(x) for x in configs) == 0


def is_valid(schema, text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def replies(grammar: Grammar, n: int, seed: int, budget: int = 400, own: bool = True) -> list[str]:
    """Random replies through poot's masks (a random-weight model), each finished inside ``budget``
    (``own=False``: whichever matcher serves the grammar, poot's or xgrammar's with poot's budget)."""
    comp = compile_pushdown(grammar, BYTE_VOCAB)
    out = []
    rng = random.Random(seed)
    stop = min(BYTE_VOCAB.stop_ids)
    for _ in range(n):
        m = comp.new_matcher()
        assert isinstance(m, RuleMatcher) or not own
        m.set_token_budget(budget)
        text = b""
        while not m.is_terminated():
            row = np.zeros((BYTE_VOCAB.size + 31) // 32, dtype=np.int32)
            m.fill_bitmask(row)
            allowed = sorted(allowed_set(row, BYTE_VOCAB.size))
            opening = [t for t in allowed if BYTE_VOCAB.token_bytes[t] in (b"{", b"[", b'"')]
            t = rng.choice(opening) if opening and rng.random() < 0.5 else rng.choice(allowed)
            assert m.accept_tokens([t])
            if t != stop:
                text += BYTE_VOCAB.token_bytes[t]
        assert m.num_accepted <= budget
        out.append(text.decode())
    return out


def test_a_recursive_schema_is_a_grammar_and_exact_below_the_unrolled_depth():
    grammar = compile_json_schema(TREE)
    assert isinstance(grammar, Grammar)
    deep = RECURSION_DEPTHS[0] + 6
    for d in range(1, deep + 1):
        assert accepts(grammar, _tree(d)) and is_valid(TREE, _tree(d)), d
    for bad in ['{"kids":[{}],"v":0}', '{"v":10}', '{"kids":[' + _tree(deep) + ',{"v":"x"}],"v":1}', '{"v":1']:
        assert not accepts(grammar, bad), bad


def _named(depth: int, name: str = "ab") -> str:
    text = '{"name":"' + name + '"}'
    for _ in range(depth - 1):
        text = '{"kids":[' + text + ',{"name":"c"}],"name":"d"}'
    return text


def _automata(grammar: Grammar) -> list[ByteAutomaton]:
    found, todo = [], [r.body for r in grammar.rules]
    while todo:
        node = todo.pop()
        if isinstance(node, ByteAutomaton):
            found.append(node)
        todo.extend(getattr(node, "items", ()) or getattr(node, "options", ()) or ())
        if isinstance(node, Repeat):
            todo.append(node.item)
    return found


def test_a_lookahead_inside_the_recursion_is_embedded_and_exact_at_any_depth():
    """``pattern`` + ``maxLength`` is a lookahead in the schema's regex; grammars have none, so the
    rule embeds it as a byte automaton instead of unrolling the whole schema."""
    grammar = compile_json_schema(NAMED)
    assert isinstance(grammar, Grammar) and _automata(grammar)
    deep = RECURSION_DEPTHS[0] + 6
    for name in ["a", "abcd", "\u00e9\u20ac\U0001d11e", "z\U0001d11e"]:
        text = _named(deep, name)
        assert accepts(grammar, text) and is_valid(NAMED, text), text
    for name in ["abcde", "", "a1", "A", "\u00e8"]:
        text = _named(deep, name)
        assert not accepts(grammar, text) and not is_valid(NAMED, text), text
    keyed = compile_json_schema(KEYED)
    assert isinstance(keyed, Grammar) and _automata(keyed)
    assert accepts(keyed, '{"a":{"b":{"c":{"d":{"e":{"f":{}}}}}}}')
    for bad in ['{"a":{"b":{"c":{"d":{"e":{"F":{}}}}}}}', '{"a":{"":{}}}', '{"a":{"b":1}}']:
        assert not accepts(keyed, bad), bad


@pytest.mark.parametrize("schema", [TREE, LINKED, NAMED, KEYED], ids=["tree", "linked-through-root", "named", "keyed"])
def test_the_grammar_agrees_with_the_unrolled_dfa_where_it_reaches(schema):
    """Random replies of the unrolled DFA (depth <= its levels) are sentences of the grammar,
    and mutations of them are accepted by both or neither."""
    grammar = compile_json_schema(schema)
    assert isinstance(grammar, Grammar)
    dfa = regex_to_dfa(schema_to_regex(schema, recursion=RECURSION_DEPTHS[0]), _BIG)
    rng = random.Random(3)
    texts = []
    for _ in range(60):
        state, data = dfa.start, bytearray()
        while not (dfa.accepting[state] and (rng.random() < 0.2 or len(data) > 80)):
            live = [b for b in range(32, 127) if dfa.transitions[state, b] >= 0]
            if not live:
                break
            b = rng.choice(live)
            data.append(b)
            state = int(dfa.transitions[state, b])
        if dfa.accepting[state]:
            texts.append(data.decode())
    assert len(texts) >= 30
    for text in texts:
        assert accepts(grammar, text), text
    alphabet = '{}[],:"0123456789vkidsnextrufalmAz\u00e9\u20ac '
    for text in texts:
        for _ in range(3):
            i = rng.randrange(len(text) + 1)
            mutated = text[:i] + rng.choice(alphabet) + text[i + 1:]
            assert accepts(grammar, mutated) == dfa.matches(mutated.encode()), mutated


@pytest.mark.parametrize("schema", [TREE, LINKED, NAMED, KEYED], ids=["tree", "linked-through-root", "named", "keyed"])
def test_random_replies_of_any_depth_validate(schema):
    grammar = compile_json_schema(schema)
    texts = replies(grammar, 30, seed=1)
    for text in texts:
        assert is_valid(schema, text), text
    depth = max(text.count("{") for text in texts)
    assert depth > 1


def test_pydantic_recursive_models_validate_at_any_depth():
    from typing import Dict, List, Optional, Union

    from pydantic import BaseModel
    from typing_extensions import TypeAliasType

    class TreeNode(BaseModel):
        name: str
        children: List["TreeNode"] = []

    class Dept(BaseModel):
        name: str
        staff: List["Emp"] = []

    class Emp(BaseModel):
        name: str
        dept: Optional[Dept] = None

    Dept.model_rebuild()
    Value = TypeAliasType("Value", Union[int, bool, None, List["Value"], Dict[str, "Value"]])

    class Doc(BaseModel):
        data: Value

    for model in (TreeNode, Dept, Doc):
        grammar = compile_json_schema(model.model_json_schema())
        assert isinstance(grammar, Grammar), model
        for text in replies(grammar, 20, seed=2, budget=300):
            model.model_validate_json(text)
    # deeper than the unrolled DFA could go
    nested = '{"data":' + "[" * 9 + "1" + "]" * 9 + "}"
    assert accepts(compile_json_schema(Doc.model_json_schema()), nested)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.text(alphabet="ab\u00e9\u20ac\U0001d11e\"\\1", max_size=6), depth=st.integers(1, 7))
def test_xgrammar_reads_an_embedded_automaton_as_poot_does(name, depth):
    """Where poot's own masks do not fit, xgrammar runs the grammar: the automaton is emitted as
    one rule per state, its bytes read back as characters (UTF-8 of 1-4 bytes).  Oracle:
    jsonschema on the document, and poot's model."""
    text = _named(depth, name)
    expected = is_valid(NAMED, text) if '"' not in name and "\\" not in name else None
    on_poot = accepts(_NAMED_GRAMMAR, text)
    if expected is not None:
        assert on_poot == expected, text
    m = _NAMED_XGRAMMAR.new_matcher()
    data = text.encode()
    on_xgrammar = m.accept_tokens(list(data)) and m.accept_tokens([min(BYTE_VOCAB.stop_ids)]) and m.is_terminated()
    assert on_xgrammar == on_poot, text


_NAMED_GRAMMAR = compile_json_schema(NAMED)


def _xgrammar_compile(grammar: Grammar):
    import os

    old = os.environ.get("POOT_GRAMMAR_MASKS")
    os.environ["POOT_GRAMMAR_MASKS"] = "off"
    try:
        compiled = compile_pushdown(grammar, BYTE_VOCAB)
    finally:
        if old is None:
            del os.environ["POOT_GRAMMAR_MASKS"]
        else:
            os.environ["POOT_GRAMMAR_MASKS"] = old
    assert compiled.compiled is not None  # xgrammar's matcher
    return compiled


_NAMED_XGRAMMAR = _xgrammar_compile(_NAMED_GRAMMAR)


def test_replies_on_xgrammar_with_an_embedded_automaton_validate():
    compiled = _NAMED_XGRAMMAR
    rng = random.Random(5)
    stop = min(BYTE_VOCAB.stop_ids)
    for _ in range(20):
        m = compiled.new_matcher()
        m.set_token_budget(300)
        text = b""
        while not m.is_terminated():
            row = np.zeros((BYTE_VOCAB.size + 31) // 32, dtype=np.int32)
            m.fill_bitmask(row)
            t = rng.choice(sorted(allowed_set(row, BYTE_VOCAB.size)))
            assert m.accept_tokens([t])
            text += b"" if t == stop else BYTE_VOCAB.token_bytes[t]
        assert is_valid(NAMED, text.decode()), text


def test_a_lookahead_is_embedded_only_where_it_cannot_see_past_its_piece():
    from poot_vllm.core.json_schema.placeholders import NeedsUnrolling
    from poot_vllm.core.json_schema.recursive import _Converter
    from poot_vllm.core.regex.parser import parse

    convert = _Converter({"\U00100000": "ref0"}, Limits())
    # the lookahead reads "a" and one of b/c: the piece takes the two items after it, then the call
    node = convert.node(parse("(?=a[bc])a[bcd]\U00100000"))
    assert isinstance(node, Sequence) and isinstance(node.items[0], ByteAutomaton)
    assert node.items[1] == RuleRef("ref0")
    # a negative lookahead that would see into the call: the schema unrolls instead
    with pytest.raises(NeedsUnrolling):
        convert.node(parse("(?!ab)a\U00100000"))
    with pytest.raises(NeedsUnrolling):
        convert.node(parse("(?<=a)b\U00100000"))
    # a branch whose lookahead no text passes is dropped, not refused
    node = convert.node(parse("(?:(?=x)y|z)\U00100000"))
    assert accepts(Grammar((Rule("root", node), Rule("ref0", Literal("!"))), "root"), "z!")


def test_a_negated_recursive_reference_takes_the_unrolled_dfa():
    schema = {"$defs": {"N": {"type": "object", "required": ["v"], "additionalProperties": False,
                              "properties": {"v": {"type": "integer"}, "n": {"not": {"$ref": "#/$defs/N"}}}}},
              "$ref": "#/$defs/N"}
    assert isinstance(compile_json_schema(schema), DFA)


def test_recursion_without_an_end_is_still_refused_naming_the_ref():
    endless = {"$defs": {"N": {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#/$defs/N"}}}},
               "$ref": "#/$defs/N"}
    with pytest.raises(UnsupportedConstruct, match=r"'\$ref' at /\$defs/N/properties/next.*a way to end"):
        compile_json_schema(endless)


# -- free-form values as one rule: where the DFA's copies pass the budget ------------------------
#: Eight optional free-form properties beside a bounded text: each free-form value is a copy in
#: the DFA (the continuation after each differs), past max_automaton_bytes even 1 container deep.
WIDE_ANY = {"type": "object", "additionalProperties": False, "required": ["name"],
            "properties": {"name": {"type": "string", "maxLength": 12},
                           **{f"x{i}": {"description": "anything"} for i in range(8)}}}


def test_free_form_values_past_the_automaton_budget_are_one_grammar_rule():
    """Served as a grammar (it was a 400 naming max_automaton_bytes), exact at any depth:
    free-form values nest deeper than the DFA's FREE_FORM_DEPTHS, and the rest of the
    schema still holds (required key, sorted keys, the string's length)."""
    from poot_vllm.core.errors import LimitExceeded
    from poot_vllm.core.json_schema import FREE_FORM_DEPTHS, served_regex

    with pytest.raises(LimitExceeded):
        served_regex(WIDE_ANY)  # the DFA alone does not fit, at any free-form depth
    grammar = compile_json_schema(WIDE_ANY)
    assert isinstance(grammar, Grammar)
    deep = "[" * (max(FREE_FORM_DEPTHS) + 3) + "1" + "]" * (max(FREE_FORM_DEPTHS) + 3)
    for text in ['{"name":"a"}', '{"name":"","x0":null,"x7":{"k":[1,"s",{"q":true}]}}',
                 '{"name":"abc","x3":' + deep + '}', '{"name":"n","x1":-1.5,"x2":"t"}']:
        assert is_valid(WIDE_ANY, text), text
        assert accepts(grammar, text), text
    for bad in ['{"x0":1}', '{"name":"a","x9":1}', '{"x0":1,"name":"a"}', '{"name":"' + "a" * 13 + '"}',
                '{"name":"a","x0":[1,]}', '{"name":"a","x0":{"k":1,"k":2}}', '{"name":"a","x0":' + deep[:-1] + '}']:
        assert not accepts(grammar, bad), bad


def test_free_form_rule_replies_validate_and_finish_inside_the_budget():
    grammar = compile_json_schema(WIDE_ANY)
    texts = replies(grammar, 30, seed=3, budget=120, own=False)
    for text in texts:
        assert is_valid(WIDE_ANY, text), text
        json.loads(text, object_pairs_hook=lambda pairs: dict(pairs) if len({k for k, _ in pairs}) == len(pairs)
                   else pytest.fail(f"repeated key in {text}"))
    assert max(text.count("{") + text.count("[") for text in texts) > 1


def test_a_schema_without_free_form_values_past_the_budget_is_still_refused():
    from poot_vllm.core.errors import LimitExceeded

    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        compile_json_schema({"type": "string", "pattern": "(a|b)*a(a|b){17}"})


#: Eighty optional fields (forty strings, forty string enums; a SAML-style config in
#: JSONSchemaBench, Github_hard/o31176): the DFA holds a copy of the string per field, each with
#: its own continuation (the keys still allowed after it), past max_automaton_bytes.
WIDE_STRINGS = {"type": "object", "additionalProperties": False, "properties": {
    **{f"attribute{i}": {"type": "string"} for i in range(1, 41)},
    **{f"attribute{i}format": {"enum": ["URI", "Basic"], "type": "string"} for i in range(1, 41)}}}
_POSITION = {"type": "object", "required": ["line", "character"], "additionalProperties": False,
             "properties": {"line": {"type": "integer", "minimum": 0}, "character": {"type": "integer", "minimum": 0}}}
#: Definitions used in many places (an LSP-style protocol schema, Github_hard/o65890): the DFA
#: holds a copy of each target per use.
LOCATIONS = {"$defs": {
    "Position": _POSITION,
    "Range": {"type": "object", "required": ["start", "end"], "additionalProperties": False,
              "properties": {"start": {"$ref": "#/$defs/Position"}, "end": {"$ref": "#/$defs/Position"}}},
    "Location": {"type": "object", "required": ["uri", "range"], "additionalProperties": False,
                 "properties": {"uri": {"type": "string", "maxLength": 8}, "range": {"$ref": "#/$defs/Range"}}}},
    "type": "object", "additionalProperties": False, "required": ["a0", "a5"],
    "properties": {f"a{i}": {"$ref": "#/$defs/Location"} for i in range(12)}}


@pytest.mark.parametrize("schema", [WIDE_STRINGS, LOCATIONS], ids=["wide-strings", "repeated-refs"])
def test_values_past_the_automaton_budget_are_calls_of_one_rule_each(schema):
    """Served as a grammar (it was a 400 naming max_automaton_bytes): each distinct string
    value and each ``$ref`` target one rule, called from every place that holds it, and the
    rest of the schema exact (sorted keys, required keys, enums, the string's length)."""
    from poot_vllm.core.errors import LimitExceeded
    from poot_vllm.core.json_schema import served_regex

    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        served_regex(schema)  # the DFA alone does not fit
    grammar = compile_json_schema(schema)
    assert isinstance(grammar, Grammar) and len(grammar.rules) > 1
    if schema is WIDE_STRINGS:
        good = ['{}', '{"attribute1":"x"}', '{"attribute1":"a","attribute10format":"URI","attribute2":"\\u00e9"}',
                '{"attribute12format":"Basic","attribute9format":"URI"}']  # (a first key among the first 8)
        bad = ['{"attribute2":"a","attribute1":"b"}', '{"attribute1":"a","attribute1":"b"}', '{"attribute41":"a"}',
               '{"attribute1format":"Other"}', '{"attribute1":1}', '{"attribute1":"a",}']
    else:
        loc = '{"range":{"end":{"character":0,"line":2},"start":{"character":1,"line":0}},"uri":"f"}'
        good = [f'{{"a0":{loc},"a5":{loc}}}', f'{{"a0":{loc},"a1":{loc},"a11":{loc},"a5":{loc}}}']
        bad = [f'{{"a0":{loc}}}', f'{{"a5":{loc},"a0":{loc}}}', '{"a0":{"uri":"f"},"a5":{"uri":"f"}}',
               f'{{"a0":{loc},"a5":{loc.replace(":0,", ":-1,")}}}',
               f'{{"a0":{loc},"a5":{loc.replace("f", "f" * 9)}}}']
    for text in good:
        assert is_valid(schema, text), text
        assert accepts(grammar, text), text
    for text in bad:  # invalid, or outside poot's canonical form (unsorted keys, a repeated key)
        assert not accepts(grammar, text), text


@pytest.mark.parametrize("schema", [WIDE_STRINGS, LOCATIONS], ids=["wide-strings", "repeated-refs"])
def test_value_rule_replies_validate_and_finish_inside_the_budget(schema):
    texts = replies(compile_json_schema(schema), 12, seed=5, budget=600, own=False)
    for text in texts:
        assert is_valid(schema, text), text
        json.loads(text, object_pairs_hook=lambda pairs: dict(pairs) if len({k for k, _ in pairs}) == len(pairs)
                   else pytest.fail(f"repeated key in {text}"))
    assert len({text for text in texts}) > 1


def test_the_free_form_rule_is_bounded_like_the_automata():
    """The fallback models its rules in Python: past its own bound (regex positions charged
    against max_automaton_bytes, or a lookahead to embed) the schema stays the DFA's 400."""
    from poot_vllm.core.errors import LimitExceeded
    from poot_vllm.core.json_schema.recursive import schema_grammar

    with_lookahead = {**WIDE_ANY, "properties": {**WIDE_ANY["properties"],
                                                 "slug": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$",
                                                          "maxLength": 12}}}
    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        compile_json_schema(with_lookahead)
    assert schema_grammar(WIDE_ANY, Limits(max_automaton_bytes=1 << 20), free_form_rule=True) is not None
    assert schema_grammar(WIDE_ANY, Limits(max_automaton_bytes=1 << 12), free_form_rule=True) is None


def test_values_as_rules_only_where_poots_masks_are_precomputed():
    """Strings with a large maxLength are chains of wide states in a rule model (no counters
    there): as a grammar their masks would come from xgrammar's matcher at ~50 ms a step at 128k
    tokens.  Such a schema keeps the DFA path's 400 (a labels schema from JSONSchemaBench,
    Github_easy/o55159, whose DFA passes the budget)."""
    from poot_vllm.core.errors import LimitExceeded
    from poot_vllm.core.json_schema.recursive import VALUE_RULES_WIDE_STATES, schema_grammar

    label = {"type": "object", "additionalProperties": False, "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 191, "pattern": "^([^,]|$)"},
        "slug": {"type": ["string", "null"], "maxLength": 191},
        **{k: {"strip": True} for k in ("id", "created_at", "created_by", "updated_at", "updated_by")}}}
    labels = {"definitions": {"label": label}, "properties": {"label": {"$ref": "#/definitions/label"}},
              "required": ["label"]}
    with pytest.raises(LimitExceeded, match="max_automaton_bytes"):
        compile_json_schema(labels)
    grammar = schema_grammar(labels, Limits(), free_form_rule=True, value_rules=True)
    assert grammar is None
    # (the same fallback serves the wide-strings schema: few wide states)
    model = rule_automata(schema_grammar(WIDE_STRINGS, Limits(), free_form_rule=True, value_rules=True))
    assert int((model.first.sum(axis=1) >= 128).sum()) <= VALUE_RULES_WIDE_STATES
