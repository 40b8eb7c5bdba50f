"""Diagnostics commands: explain-retracing (any script), diagnose retracing / pipeline, lint."""

from __future__ import annotations

import json
import logging
import sys

import click

from myxtts.cli.common import config_option, load, override_option
from myxtts.cli.failures import clean_errors


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
              help="Write one JSON line per trace event to FILE, then one per proposed fix.")
@click.option("--strict", is_flag=True,
              help="Stop (exit 1) at the first unexpected retrace; with --verify: exit 1 when a fix is not verified.")
@click.option("--verify", is_flag=True,
              help="Run the program a second time with each proposed fix applied and report whether the retraces "
                   "are gone and the outputs unchanged.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@clean_errors
def explain_retracing_command(json_path: str | None, strict: bool, verify: bool, command: tuple[str, ...]) -> None:
    """Run `python script.py ARGS` in-process and explain every tf.function retrace it causes.

    At the end, one fix per function that retraced, derived from every call seen; --verify proves it.
    Example: myxtts explain-retracing --verify --json traces.jsonl -- python train.py --epochs 1
    """
    from myxtts.diagnostics import fix_report, fixes
    from myxtts.diagnostics.runner import run_script
    from myxtts.diagnostics.verify import VERIFIED, CallRecorder, verify_proposals

    first_calls = CallRecorder() if verify else None
    handler = _attach_log_handler()
    try:  # under --verify the first run never stops early: the fixes need every call
        result = run_script(list(command), strict=strict and not verify, json_path=json_path, hooks=first_calls,
                            seed=0 if verify else None)
    finally:
        _detach_log_handler(handler)
    if result.program_traceback:  # the program's own error, as `python script.py` prints it
        click.echo(result.program_traceback.rstrip("\n"), err=True)
    click.echo(result.monitor.format_summary(), err=True)
    if result.error is not None:
        click.echo(f"Error (strict): {result.error}", err=True)
    proposals = fixes.propose_all(result.monitor)
    verifications = None
    if verify and proposals:
        if any(proposal.mechanical for proposal in proposals):
            click.echo("[explain-retracing] running the program again with the fixes applied (--verify)", err=True)
        verifications, second = verify_proposals(list(command), proposals, result, first_calls)
        if second is not None and second.error_text:
            click.echo(f"[explain-retracing] the second run stopped: {second.error_text}", err=True)
    click.echo(fix_report.format_fixes(proposals, verifications if verify else None), err=True)
    if json_path:
        fix_report.append_json_lines(json_path, fix_report.fix_records(proposals, verifications))
    exit_code = result.exit_code
    if not exit_code and strict and verify and any(v.status != VERIFIED for v in verifications or []):
        exit_code = 1
    sys.exit(exit_code)


@click.command("lint")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@clean_errors
def lint_command(paths: tuple[str, ...]) -> None:
    """Static checks for retracing and input-stall patterns (file:line, rule, fix). Exit 1 on findings."""
    from myxtts.diagnostics.lint import lint_paths

    findings = lint_paths(list(paths))
    for finding in findings:
        click.echo(finding.format())
    click.echo(f"{len(findings)} finding(s).", err=True)
    sys.exit(1 if findings else 0)


@click.group("diagnose")
def diagnose_group() -> None:
    """Measure a configured setup: input pipeline throughput, retracing of the training steps."""


@diagnose_group.command("pipeline")
@config_option()
@override_option()
@click.option("--steps", type=int, default=50, show_default=True, help="Batches measured per phase.")
@click.option("--target-steps-per-second", type=float, default=None,
              help="Consumer rate to feed (e.g. an accelerator's measured steps/s).")
@click.option("--model-flops", type=float, default=None, help="FLOPs of one training step (with --device-peak-tflops).")
@click.option("--device-peak-tflops", type=float, default=None, help="Device peak, e.g. 989 for an H100 (bf16 dense).")
@click.option("--split", type=click.Choice(["train", "validation"]), default="train", show_default=True)
@click.option("--vocoder", "vocoder_input", is_flag=True,
              help="Diagnose train-vocoder's input (fixed-length audio and mel segments) instead of the acoustic model's.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON.")
@clean_errors
def diagnose_pipeline_command(config_path: str, overrides: tuple[str, ...], steps: int,
                              target_steps_per_second: float | None, model_flops: float | None,
                              device_peak_tflops: float | None, split: str, vocoder_input: bool,
                              json_path: str | None) -> None:
    """Producer rate of the configured InputPipeline (or, with --vocoder, of the vocoder's segments) against a
    consumer target, with ranked fixes.

    Without a target this reports the producer alone plus the static checks (Python functions,
    generator sources, sequential maps, final prefetch) and per-stage rates.
    """
    from myxtts.data.pipeline import InputPipeline
    from myxtts.diagnostics.pipeline_probe import diagnose_dataset, target_from_flops

    cfg = load(config_path, overrides)
    if target_steps_per_second is None and (model_flops is not None or device_peak_tflops is not None):
        if model_flops is None or device_peak_tflops is None:
            raise click.UsageError("--model-flops and --device-peak-tflops go together.")
        target_steps_per_second = target_from_flops(model_flops, device_peak_tflops * 1e12)
    if vocoder_input:
        from myxtts.data.vocoder_segments import VocoderSegments

        dataset = VocoderSegments(cfg, split).dataset()
    else:
        dataset = InputPipeline(cfg, split=split).dataset(repeat=True)  # CacheError (a ValueError) names `prepare`
    report = diagnose_dataset(dataset, steps=steps, target_steps_per_second=target_steps_per_second)
    click.echo(report.format())
    if json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(report.to_dict(), handle, indent=2)
    sys.exit(1 if report.feeds_target is False else 0)


@diagnose_group.command("retracing")
@config_option()
@override_option()
@click.option("--steps", type=int, default=20, show_default=True, help="Real training steps run after warm-up.")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Run directory for the check's training run (default: a temporary one, removed).")
@click.option("--check-batches", type=int, default=None,
              help="Train batches compared with signatures() (default: max(steps, 4 x shapes)).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the report as JSON.")
@clean_errors
def diagnose_retracing_command(config_path: str, overrides: tuple[str, ...], steps: int, workdir: str | None,
                               check_batches: int | None, json_path: str | None) -> None:
    """Config + pipeline shapes vs signatures() + N real training steps under the retrace explainer.

    Exit 1 when anything retraces after warm-up or a batch shape is not a declared signature.
    """
    from myxtts.training.retracing_check import diagnose_retracing

    cfg = load(config_path, overrides)
    report = diagnose_retracing(cfg, steps=steps, workdir=workdir, check_batches=check_batches,
                                echo=lambda line: click.echo(line, err=True))
    click.echo(report.format())
    if json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(report.to_dict(), handle, indent=2, default=str)
    sys.exit(report.exit_code)


COMMANDS = [explain_retracing_command, lint_command, diagnose_group]
