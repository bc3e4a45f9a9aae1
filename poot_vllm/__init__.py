"""poot-vllm: guaranteed guided decoding for vLLM.

The core (compilers, automata, vocabulary, masks) imports no vLLM; the adapter
modules :mod:`poot_vllm.adapter.backend`, :mod:`poot_vllm.adapter.plugin` and
:mod:`poot_vllm.adapter.patches` are the only ones that touch vLLM.
"""

__version__ = "0.1.0"

from poot_vllm.core.errors import PootError, LimitExceeded, UnsupportedConstruct, ConstraintSyntaxError
from poot_vllm.core.limits import Limits, DEFAULT_LIMITS

__all__ = ["PootError", "LimitExceeded", "UnsupportedConstruct", "ConstraintSyntaxError", "Limits", "DEFAULT_LIMITS",
           "register", "__version__"]


def register() -> None:
    """Make the backend ``poot`` available in this process now.

    ``vllm serve`` loads poot through vLLM's plugin entry point by itself.
    Offline ``LLM(..., structured_outputs_config={"backend": "poot"})`` builds
    its config before vLLM loads plugins, so call this first there (cheap,
    idempotent; imports no vLLM module until vLLM does).
    """
    from poot_vllm.adapter.plugin import register as _register

    _register()
