"""A user's instructor app, run by the client venv's Python (not poot's venv).

instructor pins ``jiter<0.15`` and ``rich<15``, older than what vLLM's own
install brings, so it cannot live in the server's environment -- and users
rarely put it there: their app talks to ``vllm serve`` over HTTP from its own
environment.  tests/e2e/test_instructor.py starts this script with the
Python of ``.venv-clients`` (created by scripts/test with
tests/clients/requirements.txt) and reads one JSON line per case.

Every case keeps instructor's defaults except ``max_tokens`` and
``max_retries=1`` (one attempt: a reply that fails validation is an error
here, never hidden by a re-ask); the HTTP requests are counted to prove it.
The tiny models have random weights, so a validated object is the server's
constraint at work.

Usage: python instructor_app.py BASE_URL MODEL  (prints {"case", "ok", "value"|"error", "requests"} lines)
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback

from client_models import PROMPT, Owner  # beside this script: shared with tests/e2e/test_clients.py

MAX_TOKENS = 200


#: Every case returns an ``Owner`` (the test re-validates it on its side).
CASES = ("tools", "tools_strict", "json_schema", "tools_partial_stream", "json_schema_partial_stream",
         "async_tools")


def _clients(base_url: str, counter: list[int]):
    import openai

    def count(_request) -> None:
        counter[0] += 1

    async def acount(_request) -> None:
        counter[0] += 1

    sync = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=180,
                         http_client=openai.DefaultHttpxClient(event_hooks={"request": [count]}))
    asynchronous = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=180,
                                      http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [acount]}))
    return sync, asynchronous


def _run(case: str, base_url: str, model: str, counter: list[int]):
    import instructor

    sync, asynchronous = _clients(base_url, counter)
    messages = [{"role": "user", "content": PROMPT}]
    common = {"model": model, "messages": messages, "max_tokens": MAX_TOKENS, "max_retries": 1}
    if case == "tools":  # instructor's default mode: one named tool, tool_choice forced
        return instructor.from_openai(sync).chat.completions.create(response_model=Owner, **common)
    if case == "tools_strict":
        return instructor.from_openai(sync, mode=instructor.Mode.TOOLS_STRICT).chat.completions.create(
            response_model=Owner, **common)
    if case == "json_schema":  # response_format json_schema
        return instructor.from_openai(sync, mode=instructor.Mode.JSON_SCHEMA).chat.completions.create(
            response_model=Owner, **common)
    if case in ("tools_partial_stream", "json_schema_partial_stream"):
        mode = instructor.Mode.TOOLS if case.startswith("tools") else instructor.Mode.JSON_SCHEMA
        partials = list(instructor.from_openai(sync, mode=mode).chat.completions.create_partial(
            response_model=Owner, **common))
        if len(partials) < 2:
            raise AssertionError(f"{len(partials)} partial object(s): not a stream")
        return Owner.model_validate(partials[-1].model_dump())  # the last partial is the whole object
    if case == "async_tools":
        async def go():
            return await instructor.from_openai(asynchronous).chat.completions.create(response_model=Owner, **common)

        return asyncio.run(go())
    raise ValueError(f"unknown case {case!r}")


def main() -> None:
    base_url, model = sys.argv[1], sys.argv[2]
    cases = sys.argv[3:] or CASES
    for case in cases:
        counter = [0]
        try:
            value = _run(case, base_url, model, counter)
            dumped = value if isinstance(value, dict) else value.model_dump()
            line = {"case": case, "ok": True, "value": dumped, "requests": counter[0]}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
            line = {"case": case, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=4), "requests": counter[0]}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
