"""poot's regex dialect: Python ``re`` syntax and full-match semantics, DFA-friendly subset.

See ``docs/regex.md`` for the supported syntax and what is refused.
"""

from poot_vllm.core.regex.parser import parse

__all__ = ["parse"]
