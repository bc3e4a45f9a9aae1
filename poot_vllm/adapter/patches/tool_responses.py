"""Read poot-forced tool calls back with the model's own tool parser.

When poot forces ``tool_choice`` required / named (tool_forcing.py), the
reply is ChatML ``<tool_call>`` markup.  vLLM parses required/named replies
its own way when the tool parser sets ``supports_required_and_named``
(named: the whole text is the arguments; required: a JSON array) -- true for
hermes when ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``.  This hook:

* stops vLLM from turning tools into an xgrammar structural tag
  (``DelegatingParser._apply_structural_tag``; poot cannot compile xgrammar's
  tags and would refuse every such request with a 400 -- for ``auto`` too,
  when a tool is ``strict`` or ``parallel_tool_calls`` is false): required /
  named are forced by poot instead, ``auto`` stays unconstrained by tools;
* records the server's ``--tool-call-parser`` (``ParserManager.get_parser``,
  API server, at startup), so poot forces calls in the format that parser reads;
* for a poot-forced request, turns ``supports_required_and_named`` off on that
  request's tool-parser instance (``DelegatingParser.parse`` /
  ``parse_delta``), so the reply goes through the parser's own
  ``extract_tool_calls`` / ``extract_tool_calls_streaming``;
* reports ``finish_reason: "tool_calls"`` for a forced reply that stopped on
  its own, named tool included (vLLM reports ``stop`` for named; 0.32:
  ``maybe_filter_parallel_tool_calls`` in chat serving, 0.33:
  ``resolve_finish_reason``).

Only active when the server's backend is poot and its parser reads a forcible
format; other requests are untouched.

A vLLM carrying ``patches/vllm-X.Y/0003`` does all four itself for a backend
that registers a tool-choice hook (``register_tool_choice_hook``; poot does in
adapter/native.py), and records the tool parser (``get_server_tool_call_parser``):
this hook is then skipped (:func:`seam_present`).
"""

from __future__ import annotations

import inspect
import logging

from poot_vllm.adapter.patches import Hook, wrap

logger = logging.getLogger("vllm.poot")

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.entrypoints.openai.chat_completion.serving",)

HOOK = Hook(
    name="tool_responses",
    target="vllm.parser.parser_manager.ParserManager.get_parser, "
    "vllm.parser.abstract_parser.DelegatingParser.{_apply_structural_tag,parse,parse_delta}, "
    "vllm.entrypoints.openai.chat_completion.serving.{maybe_filter_parallel_tool_calls (0.32),"
    "resolve_finish_reason (0.33)}",
    what="record the tool parser's codec; parse poot-forced replies with the tool parser's own format; "
    "finish_reason tool_calls",
    why="vLLM reads required/named replies as bare JSON when the parser supports it, not as <tool_call> markup",
    versions="0.32.x, 0.33.x (finish-reason seam feature-detected)",
    until="vLLM lets a structured-output backend own tool_choice forcing (patches/0003: tool-choice hook)",
    process="API server",
    upstream="patches/vllm-0.33/0003-tool-choice-and-final-output-hooks.patch (register_tool_choice_hook)",
)


def seam_present() -> bool:
    """patches/0003: vLLM records the tool parser, and its parser and chat serving ask the
    backend's tool-choice hook (no structural tag, the parser's own format, ``tool_calls``)."""
    from poot_vllm.adapter.native import tool_choice_hook_point

    if tool_choice_hook_point() is None:
        return False
    from vllm.parser import abstract_parser

    return hasattr(abstract_parser, "tool_choice_forced_by_backend")


def _wrap_get_parser() -> None:
    from vllm.parser.parser_manager import ParserManager

    from poot_vllm.adapter.tool_forcing import record_tool_parser

    def make(orig):
        signature = inspect.signature(orig)

        def get_parser(cls, *args, **kwargs):
            result = orig(cls, *args, **kwargs)
            try:
                bound = signature.bind(cls, *args, **kwargs)
                bound.apply_defaults()
                a = bound.arguments
                record_tool_parser(a.get("tool_parser_name"), a.get("enable_auto_tools"), a.get("tokenizer"),
                                   a.get("model_name"))
            except Exception:  # recording must never break server start
                logger.exception("poot: could not record the tool parser")
            return result

        return get_parser

    wrap(ParserManager, "get_parser", make)


def _wrap_parser_methods() -> None:
    from vllm.parser.abstract_parser import DelegatingParser

    from poot_vllm.adapter.tool_forcing import forces_tool_call

    def read_own_format(parser, request) -> None:
        tool_parser = getattr(parser, "_tool_parser", None)
        if tool_parser is not None and forces_tool_call(request):
            # Instance attribute: this request's parser only.
            tool_parser.supports_required_and_named = False

    def make_parse(orig):
        def parse(self, model_output, request, *args, **kwargs):
            read_own_format(self, request)
            return orig(self, model_output, request, *args, **kwargs)

        return parse

    def make_parse_delta(orig):
        def parse_delta(self, delta_text, delta_token_ids, request, *args, **kwargs):
            read_own_format(self, request)
            return orig(self, delta_text, delta_token_ids, request, *args, **kwargs)

        return parse_delta

    def make_apply_structural_tag(orig):
        def _apply_structural_tag(self, request, *args, **kwargs):
            from poot_vllm.adapter.server_state import poot_is_server_backend

            if poot_is_server_backend():
                return request  # poot forces required/named itself (tool_forcing.py)
            return orig(self, request, *args, **kwargs)

        return _apply_structural_tag

    if hasattr(DelegatingParser, "_apply_structural_tag"):
        wrap(DelegatingParser, "_apply_structural_tag", make_apply_structural_tag, expects=("self", "request"))
    else:
        logger.warning("poot: DelegatingParser._apply_structural_tag moved; vLLM tool structural tags will be 400s")
    wrap(DelegatingParser, "parse", make_parse, expects=("self", "model_output", "request"))
    wrap(DelegatingParser, "parse_delta", make_parse_delta, expects=("self", "delta_text", "delta_token_ids", "request"))


def _wrap_finish_reason() -> None:
    import importlib

    from poot_vllm.adapter.tool_forcing import forces_tool_call

    serving = importlib.import_module("vllm.entrypoints.openai.chat_completion.serving")
    if hasattr(serving, "resolve_finish_reason"):  # 0.33
        def make_resolve(orig):
            def resolve_finish_reason(engine_finish_reason, request, tool_calls_made, *args, **kwargs):
                reason = orig(engine_finish_reason, request, tool_calls_made, *args, **kwargs)
                if reason == "stop" and tool_calls_made and request is not None and forces_tool_call(request):
                    return "tool_calls"
                return reason

            return resolve_finish_reason

        wrap(serving, "resolve_finish_reason", make_resolve,
             expects=("engine_finish_reason", "request", "tool_calls_made"))
        try:
            stream_processor = importlib.import_module("vllm.entrypoints.openai.chat_completion.stream_processor")
        except ImportError:
            return
        if hasattr(stream_processor, "resolve_finish_reason"):
            stream_processor.resolve_finish_reason = serving.resolve_finish_reason
        return
    if not hasattr(serving, "maybe_filter_parallel_tool_calls"):  # seam moved: leave vLLM's finish reasons
        logger.warning("poot: no finish-reason seam in chat serving; forced named calls report vLLM's reason")
        return

    def make_filter(orig):  # 0.32: called on every choice, streaming or not, before it is sent
        def maybe_filter_parallel_tool_calls(item, request, *args, **kwargs):
            item = orig(item, request, *args, **kwargs)
            if getattr(item, "finish_reason", None) == "stop" and forces_tool_call(request):
                message = getattr(item, "message", None)
                if message is None or message.tool_calls:
                    item.finish_reason = "tool_calls"
            return item

        return maybe_filter_parallel_tool_calls

    wrap(serving, "maybe_filter_parallel_tool_calls", make_filter, expects=("item", "request"))


def apply() -> None:
    _wrap_get_parser()
    _wrap_parser_methods()
    _wrap_finish_reason()
