"""``response_format: {"type": "json_object"}`` as a grammar.

OpenAI's JSON mode promises a JSON *object* at the top level (vLLM's own
xgrammar backend compiles it as the schema ``{"type": "object"}``), so the
reply is exactly one object -- no leading or trailing whitespace -- whose values
nest to any depth (hence a pushdown grammar, not a DFA).

Whitespace is bounded so a model can never stall in an endless run of blanks:
each gap between two JSON tokens (after ``{ [ , :`` and before ``} ] , :``)
holds at most one space, and nothing else (no newlines or tabs).  Every
compact or single-spaced serialization (``json.dumps(v)``,
``json.dumps(v, separators=(",", ":"))``) is accepted.

Strings: any character except ``"``, ``\\`` and the control characters
U+0000-U+001F (JSON forbids them raw), or an escape ``\\" \\\\ \\/ \\b \\f \\n
\\r \\t \\uXXXX``.  Numbers: JSON's grammar (no leading zeros, no ``+``, no
``NaN``/``Infinity``).
"""

from __future__ import annotations

import functools

from poot_vllm.core.grammar.gbnf import Grammar, parse_gbnf

JSON_OBJECT_GBNF = r"""
root    ::= object
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex )
hex     ::= [0-9a-fA-F]
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
# One optional space per gap: bounded, and never ambiguous with its neighbours.
ws      ::= " "?
"""


@functools.lru_cache(maxsize=1)
def json_object_grammar() -> Grammar:
    """The grammar of one JSON object (see module docstring)."""
    return parse_gbnf(JSON_OBJECT_GBNF)


_PLAIN_STRING_RULE = 'r_string ::= "\\"" r_char* "\\""'
_FAST_STRING_RULES = (
    'r_string ::= "\\"" r_string_rest\n'
    'r_string_rest ::= ("\\"" | r_char r_string_rest) (= [ ,:\\]}])'
)


def json_object_runtime_ebnf(plain_ebnf: str) -> str:
    """The xgrammar text poot runs for json_object: the same language, faster masks.

    ``string ::= "\\"" char* "\\""`` makes xgrammar check every token that
    contains a quote at run time (~60 ms per step inside a string with a 128k
    vocabulary).  Written right-recursively with a lookahead on what can follow
    a string here -- a space, ``,``, ``:``, ``]`` or ``}``, which is exactly the
    grammar's follow set, so the language does not change -- xgrammar
    precomputes those masks (~0.05 ms per step).
    """
    if _PLAIN_STRING_RULE not in plain_ebnf:
        raise AssertionError("json_object grammar changed: update json_object_runtime_ebnf")
    return plain_ebnf.replace(_PLAIN_STRING_RULE, _FAST_STRING_RULES)
