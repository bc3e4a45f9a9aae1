"""Grammars: GBNF ``guided_grammar`` and ``json_object``, parsed and measured.

:func:`parse_gbnf` validates on the API server (no xgrammar import);
:mod:`poot_vllm.core.matchers.pushdown` runs a parsed grammar on xgrammar's
matcher in the engine.
"""

from poot_vllm.core.grammar.emit import grammar_to_xgrammar_ebnf
from poot_vllm.core.grammar.gbnf import Grammar, grammar_cost, parse_gbnf
from poot_vllm.core.grammar.json_object import json_object_grammar

__all__ = ["Grammar", "parse_gbnf", "grammar_cost", "grammar_to_xgrammar_ebnf", "json_object_grammar"]
