"""Diagnostics commands: explain-retracing (any script), diagnose retracing / pipeline, lint."""

from __future__ import annotations

import json
import logging
import sys

import click

from myxtts.cli.common import clean_errors, config_option, load, override_option


class _EchoHandler(logging.Handler):
    """Log records of the explainer as plain lines on stderr (works under click's CliRunner)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


def _attach_log_handler() -> logging.Handler:
    handler = _EchoHandler()
    handler.setFormatter(logging.Formatter("[explain-retracing] %(message)s"))
    logger = logging.getLogger("myxtts.diagnostics")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler


def _detach_log_handler(handler: logging.Handler) -> None:
    logger = logging.getLogger("myxtts.diagnostics")
    logger.removeHandler(handler)
    logger.propagate = True


@click.command("explain-retracing", context_settings={"ignore_unknown_options": True,
                                                      "allow_interspersed_args": False})
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write one JSON line per trace event to FILE.")
@click.option("--strict", is_flag=True, help="Stop (exit 1) at the first unexpected retrace.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@clean_errors(ValueError)
def explain_retracing_command(json_path: str | None, strict: bool, command: tuple[str, ...]) -> None:
    """Run `python script.py ARGS` in-process and explain every tf.function retrace it causes.

    Example: myxtts explain-retracing --json traces.jsonl -- python train.py --epochs 1
    """
    from myxtts.diagnostics.runner import run_script

    handler = _attach_log_handler()
    try:
        result = run_script(list(command), strict=strict, json_path=json_path)
    finally:
        _detach_log_handler(handler)
    click.echo(result.monitor.format_summary(), err=True)
    if result.error is not None:
        click.echo(f"Error (strict): {result.error}", err=True)
    sys.exit(result.exit_code)


@click.command("lint")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@clean_errors(ValueError)
def lint_command(paths: tuple[str, ...]) -> None:
    """Static checks for retracing and input-stall patterns (file:line, rule, fix). Exit 1 on findings."""
    from myxtts.diagnostics.lint import lint_paths

    findings = lint_paths(list(paths))
    for finding in findings:
        click.echo(finding.format())
    click.echo(f"{len(findings)} finding(s).", err=True)
    sys.exit(1 if findings else 0)


COMMANDS = [explain_retracing_command, lint_command]
