"""Honour ``guided_*`` request fields on the OpenAI endpoints (API server).

vLLM removed ``guided_choice`` / ``guided_regex`` / ``guided_grammar`` /
``guided_json``; it keeps them in ``request.model_extra`` and ignores them
with a 200 -- an unconstrained reply for a client that asked for a
constraint.  We wrap ``extract_structured_outputs`` on the chat and completion
request classes: it runs in the request handler before the engine is asked
and before a streaming response starts, so a refusal is a real 400 for
``stream: true`` too.  The wrapper maps the fields with poot's precedence
(requests.py), runs poot's full validation, and returns the
``StructuredOutputsParams`` the engine sees.  Only active when the server's
backend is poot; where this process does not know the backend yet, the
``guided_*`` fields are still carried to vLLM's validation, never dropped.
"""

from __future__ import annotations

from poot_vllm.adapter.patches import Hook, wrap

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.protocol", "vllm.entrypoints.openai.completion.protocol")

HOOK = Hook(
    name="request_fields",
    target="vllm.entrypoints.openai.{chat_completion,completion}.protocol.*Request.extract_structured_outputs",
    what="map guided_* fields and response_format to one poot constraint, validate it, 400 on refusal",
    why="vLLM ignores guided_* fields with a 200 (unconstrained output)",
    versions="0.32.x, 0.33.x",
    until="vLLM has a request hook point for structured-output plugins (patches/0002)",
    process="API server",
    upstream="patches/vllm-0.33/0002-structured-outputs-request-hook.patch",
)

def seam_present() -> bool:
    """patches/0002: chat and completion requests run registered structured-outputs hooks."""
    from poot_vllm.adapter.native import request_hook_point

    if request_hook_point() is None:
        return False
    from vllm.entrypoints.openai.chat_completion import protocol as chat
    from vllm.entrypoints.openai.completion import protocol as completion

    return hasattr(chat, "apply_structured_outputs_hooks") and hasattr(completion, "apply_structured_outputs_hooks")


def apply() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    from poot_vllm.adapter.requests import structured_outputs_for, structured_outputs_unknown_backend
    from poot_vllm.adapter.server_state import server_backend

    def make(orig):
        def extract_structured_outputs(self, *args, **kwargs):
            backend = server_backend()
            if backend == "poot":
                return structured_outputs_for(self, lambda request: orig(request, *args, **kwargs))
            if backend is None:  # not known in this process yet: never drop a constraint
                return structured_outputs_unknown_backend(self, lambda request: orig(request, *args, **kwargs))
            return orig(self, *args, **kwargs)

        return extract_structured_outputs

    for cls in (ChatCompletionRequest, CompletionRequest):
        wrap(cls, "extract_structured_outputs", make, expects=("self",))
