"""poot's core: everything that decides what a reply may be, without vLLM.

Constraint text goes in (:mod:`.constraints`), automata come out
(:mod:`.regex` -> :mod:`.automata`, :mod:`.json_schema`, :mod:`.grammar`),
and are turned into token masks over a tokenizer's exact bytes
(:mod:`.vocabulary`, :mod:`.token_trie`, :mod:`.masks`) that a per-request
matcher walks (:mod:`.matchers`).  :mod:`.budget` keeps replies inside
``max_tokens``; :mod:`.tool_calls` is the tool-call envelope.

The rule, enforced by ``tests/unit/test_layout.py``: nothing under
``poot_vllm.core`` imports vLLM, torch or :mod:`poot_vllm.adapter`, so the
core's tests run without a server or a vLLM install.
"""
