"""``python -m poot_vllm.adapter.tool_parser_choice MODEL_DIR``: the ``--tool-call-parser`` for a model.

Prints the vLLM tool parser that reads the model's tool-call format and exits
0 when poot can force that format (``tool_choice`` required / named); exits 1
(printing the parser name, if any, to stderr) otherwise.  ``scripts/serve``
uses it to turn tool calling on by default.  ``POOT_TOOL_CODEC`` overrides
the format detected from the model's chat template / model type.
"""

from __future__ import annotations

import sys

from poot_vllm.core.tool_calls.selection import codec_for_model_dir


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m poot_vllm.adapter.tool_parser_choice MODEL_DIR", file=sys.stderr)
        return 2
    try:
        codec = codec_for_model_dir(argv[0])
    except (OSError, ValueError) as exc:
        print(f"cannot read the model's chat template: {exc}", file=sys.stderr)
        return 1
    if codec is None:
        print("no tool-call format found in the chat template or model type", file=sys.stderr)
        return 1
    if not codec.can_force:
        print(f"{codec.vllm_parser}: the {codec.name} format is parsed but poot does not force it", file=sys.stderr)
        return 1
    print(codec.vllm_parser)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
