"""Data commands: `myxtts prepare` (validated feature cache) and `myxtts stats` (lengths, buckets)."""

from __future__ import annotations

import json

import click

from myxtts.cli.common import clean_errors, config_option, load, override_option


@click.command("prepare")
@config_option()
@override_option()
@click.option("--force", is_flag=True, help="Rebuild the cache even if it is up to date.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@clean_errors(ValueError, OSError)
def prepare_command(config_path: str, overrides: tuple[str, ...], force: bool, no_progress: bool) -> None:
    """Validate every clip, compute mel features once and write the sharded cache (cfg.data.cache_dir)."""
    from myxtts.data.prepare import prepare

    cfg = load(config_path, overrides)
    result = prepare(cfg, force=force, progress=not no_progress, echo=click.echo)
    click.echo(result.summary())


@click.command("stats")
@config_option()
@override_option()
@click.option("--shapes", type=click.IntRange(min=1), default=None,
              help="Number of bucket shapes to plan (default: data.num_buckets).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@clean_errors(ValueError, OSError)
def stats_command(config_path: str, overrides: tuple[str, ...], shapes: int | None, as_json: bool) -> None:
    """Length percentiles of the prepared cache, suggested max_* and bucket boundaries with their fill."""
    from myxtts.data.stats import cache_stats, format_stats

    cfg = load(config_path, overrides)
    report = cache_stats(cfg, shapes=shapes)
    click.echo(json.dumps(report, indent=2) if as_json else format_stats(report))


COMMANDS = [prepare_command, stats_command]
