"""Bring back ``--guided-decoding-backend`` on ``vllm serve``.

Upstream removed the flag in favour of ``--structured-outputs-config.backend``.
Users (and poot's README) still write ``vllm serve MODEL
--guided-decoding-backend poot``.  vLLM loads general plugins inside
``AsyncEngineArgs.add_cli_args`` right before it calls
``EngineArgs.add_cli_args``, so wrapping the latter adds the flag to the very
parser being built; wrapping ``FlexibleArgumentParser.parse_args`` folds the
value into ``structured_outputs_config.backend`` before vLLM reads it.
Both forms work, and giving both with different values is an error.
"""

from __future__ import annotations

from poot_vllm.adapter.patches import Hook, wrap

FLAG = "--guided-decoding-backend"
DEST = "guided_decoding_backend"

#: Applied when the first of these vLLM modules is imported (adapter/when_imported.py).
TRIGGERS = ("vllm.engine.arg_utils",)

HOOK = Hook(
    name="cli_flag",
    target="vllm.engine.arg_utils.EngineArgs.add_cli_args, "
    "vllm.utils.argparse_utils.FlexibleArgumentParser.parse_args",
    what=f"add {FLAG} and fold it into structured_outputs_config.backend",
    why="the flag was removed upstream; users and scripts still pass it",
    versions="0.32.x, 0.33.x",
    until="never needed on a fork that keeps the flag; harmless otherwise",
    process="API server (CLI parse)",
    upstream="none: upstream removed the flag on purpose; remove when users no longer pass it",
)


def _add_flag(parser) -> None:
    if any(FLAG in action.option_strings for action in parser._actions):
        return
    parser.add_argument(
        FLAG,
        dest=DEST,
        default=None,
        help="Structured-output backend (alias of --structured-outputs-config.backend), e.g. 'poot'.",
    )


def fold_backend_flag(args) -> None:
    """Move ``args.guided_decoding_backend`` into ``args.structured_outputs_config``."""
    from poot_vllm.adapter.server_state import record_server_backend

    value = getattr(args, DEST, None)
    if value is None:
        config = getattr(args, "structured_outputs_config", None)
        record_server_backend(getattr(config, "backend", None))
        return
    record_server_backend(value)
    config = getattr(args, "structured_outputs_config", None)
    if config is None:
        from vllm.config import StructuredOutputsConfig

        args.structured_outputs_config = StructuredOutputsConfig(backend=value)
        return
    if config.backend not in ("auto", value):
        raise SystemExit(
            f"error: {FLAG} {value} conflicts with --structured-outputs-config.backend {config.backend}"
        )
    from vllm.config import StructuredOutputsConfig

    fields = {k: getattr(config, k) for k in StructuredOutputsConfig.__dataclass_fields__}
    fields["backend"] = value  # a new instance so pydantic validates the name
    args.structured_outputs_config = StructuredOutputsConfig(**fields)


def apply() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def make_add_cli_args(orig):
        def add_cli_args(parser, *args, **kwargs):
            parser = orig(parser, *args, **kwargs)
            _add_flag(parser)
            return parser

        return add_cli_args

    def make_parse_args(orig):
        def parse_args(self, args=None, namespace=None, *rest, **kwargs):
            parsed = orig(self, args, namespace, *rest, **kwargs)
            fold_backend_flag(parsed)
            return parsed

        return parse_args

    wrap(EngineArgs, "add_cli_args", make_add_cli_args, expects=("parser",))
    wrap(FlexibleArgumentParser, "parse_args", make_parse_args, expects=("self", "args", "namespace"))
