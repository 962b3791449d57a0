"""``python -m onnx_light COMMAND ...``: the package's command line.

Commands: ``prepare`` (onnx_light.prepare: bind a decoder export's caches), ``generate``
(onnx_light.text: text in, text out) and ``serve`` (onnx_light.serve: an OpenAI-compatible
HTTP server). Each command is a module with ``add_arguments(parser)``
and ``run(args) -> exit code``; add one to COMMANDS.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS = {
    "prepare": ("onnx_light.prepare",
                "turn a decoder export into an onnx-light model with persistent_bindings"),
    "generate": ("onnx_light.text", "generate text with a prepared decoder and a tokenizer"),
    "serve": ("onnx_light.serve", "serve a prepared decoder (or --demo) over an "
                                  "OpenAI-compatible HTTP API"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnx_light")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(module=module)
        importlib.import_module(module).add_arguments(command)
    args = parser.parse_args(argv)
    return importlib.import_module(args.module).run(args)


if __name__ == "__main__":
    sys.exit(main())
