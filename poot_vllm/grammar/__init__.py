"""Grammars (GBNF ``guided_grammar`` and ``json_object``) on a pushdown matcher.

:func:`parse_gbnf` validates on the API server (no xgrammar import);
:func:`compile_pushdown` and :class:`PushdownMatcher` run the grammar on
xgrammar's matcher in the engine (xgrammar is imported lazily there).
"""

from .emit import grammar_to_xgrammar_ebnf
from .gbnf import Grammar, grammar_cost, parse_gbnf
from .json_object import json_object_grammar
from .matcher import CompiledPushdown, PushdownMatcher, compile_pushdown

__all__ = ["Grammar", "parse_gbnf", "grammar_cost", "grammar_to_xgrammar_ebnf", "json_object_grammar",
           "CompiledPushdown", "PushdownMatcher", "compile_pushdown"]
