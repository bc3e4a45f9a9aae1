"""poot-vllm: guaranteed guided decoding for vLLM.

The core (compilers, automata, vocabulary, masks) imports no vLLM; the adapter
modules :mod:`poot_vllm.adapter.backend`, :mod:`poot_vllm.adapter.plugin` and
:mod:`poot_vllm.adapter.patches` are the only ones that touch vLLM.
"""

__version__ = "0.1.0"

from poot_vllm.core.errors import PootError, LimitExceeded, UnsupportedConstruct, ConstraintSyntaxError
from poot_vllm.core.limits import Limits, DEFAULT_LIMITS

__all__ = ["PootError", "LimitExceeded", "UnsupportedConstruct", "ConstraintSyntaxError", "Limits", "DEFAULT_LIMITS", "__version__"]
