"""Byte-level automata: the :class:`DFA` type and its budgeted builder."""

from poot_vllm.automata.dfa import DFA

__all__ = ["DFA"]
