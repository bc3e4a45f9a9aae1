"""Run poot's request checks off the API server's event loop (``adapter/offload.py``).

vLLM's chat and completion handlers check a request synchronously on the
event loop; a heavy (but admissible) constraint would stall ``/health`` and
every other client for the seconds its compile takes.  The handlers are
wrapped so that, on a poot server, a request carrying a constraint is first
checked on poot's bounded thread pool: a refusal returns the same 400 at once,
a full queue or an overrun deadline a 503, and otherwise vLLM's own handler
runs and finds every result in poot's caches.
"""

from __future__ import annotations

import logging

from poot_vllm.adapter.patches import Hook, original, wrap

logger = logging.getLogger("vllm.poot")

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.serving", "vllm.entrypoints.openai.completion.serving")

HOOK = Hook(
    name="serving_offload",
    target="vllm.entrypoints.openai.chat_completion.serving.OpenAIServingChat.create_chat_completion, "
    "vllm.entrypoints.openai.completion.serving.OpenAIServingCompletion.create_completion",
    what="check poot constraints on a bounded thread pool with a deadline before vLLM's handler runs",
    why="vLLM checks structured outputs synchronously on the event loop: heavy constraints stall /health",
    versions="0.32.x, 0.33.x",
    until="vLLM runs structured-output validation off the event loop (no upstream change proposed yet)",
    process="API server",
    upstream="none yet: an async validation hook for structured-output backends",
)


async def precheck_response(serving, request):
    """None when vLLM's handler should run; else the error response to return."""
    from http import HTTPStatus

    from vllm.exceptions import VLLMValidationError

    from poot_vllm.adapter.offload import CheckTimedOut, ServerBusy, offloader, precheck
    from poot_vllm.core.limits import server_limits

    extract = original(type(request).extract_structured_outputs)
    try:
        await offloader(server_limits()).run(lambda: precheck(request, extract, serving.model_config))
    except VLLMValidationError as exc:
        return serving.create_error_response(exc)
    except (ServerBusy, CheckTimedOut) as exc:
        return serving.create_error_response(
            f"poot: {exc}; retry later, or simplify the constraint (server limits: POOT_VALIDATION_WORKERS, "
            "POOT_VALIDATION_QUEUE, POOT_VALIDATION_TIMEOUT_MS)",
            err_type="ServiceUnavailableError", status_code=HTTPStatus.SERVICE_UNAVAILABLE)
    except Exception:  # noqa: BLE001 - a precheck bug must not fail the request: vLLM's path checks again
        logger.exception("poot: the off-loop constraint check failed; checking on the request path instead")
    return None


def apply() -> None:
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion

    from poot_vllm.adapter.offload import carries_constraint
    from poot_vllm.adapter.server_state import poot_is_server_backend

    def make(orig):
        async def handler(self, request, *args, **kwargs):
            if poot_is_server_backend() and carries_constraint(request):
                error = await precheck_response(self, request)
                if error is not None:
                    return error
            return await orig(self, request, *args, **kwargs)

        return handler

    wrap(OpenAIServingChat, "create_chat_completion", make, expects=("self", "request"))
    wrap(OpenAIServingCompletion, "create_completion", make, expects=("self", "request"))
