"""Byte-level automata: the :class:`DFA` type and its budgeted builder."""

from poot_vllm.core.automata.dfa import DFA

__all__ = ["DFA"]
