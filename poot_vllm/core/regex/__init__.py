"""poot's regex dialect: Python ``re`` syntax and full-match semantics, DFA-friendly subset.

The one front end for ``guided_regex`` (:func:`parse`), JSON Schema ``pattern``
(:func:`parse_search`) and GBNF classes (:mod:`.classes`).  See
``docs/regex.md`` for the supported syntax and what is refused.
"""

from poot_vllm.core.regex.parser import parse, parse_search

__all__ = ["parse", "parse_search"]
