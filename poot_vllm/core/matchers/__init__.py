"""Per-request matchers: the state vLLM advances token by token.

:mod:`.dfa` walks precomputed token masks of a DFA (regex, choice, JSON
Schema, tool calls); :mod:`.pushdown` runs grammars (GBNF, json_object) on
xgrammar's matcher.  Both follow the protocol in docs/architecture.md.
"""
