"""Data commands: `myxtts prepare` (validated feature cache), `myxtts stats` (lengths, buckets) and
`myxtts data-service` (a tf.data service dispatcher or worker for data.service_address)."""

from __future__ import annotations

import json

import click

from myxtts.cli.common import config_option, load, override_option
from myxtts.cli.failures import clean_errors
from myxtts.errors import InputError


@click.command("prepare")
@config_option()
@override_option()
@click.option("--force", is_flag=True, help="Recompute every clip even if the cache is up to date.")
@click.option("--rebuild", is_flag=True,
              help="Replace a cache prepared with other parameters (audio, text, corpus or filters) in "
                   "data.cache_dir; without it, that cache is kept and prepare refuses, naming what changed.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Threads processing clips (default: every core).")
@click.option("--lock-timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Give up (exit 2) after waiting this long for another prepare of the same cache "
                   "(default: wait until it is done).")
@clean_errors
def prepare_command(config_path: str, overrides: tuple[str, ...], force: bool, rebuild: bool, no_progress: bool,
                    workers: int | None, lock_timeout: float | None) -> None:
    """Validate every clip, compute mel features once and write the cache (cfg.data.cache_dir); a rerun
    processes only new or changed clips, and after a stopped run only the clips it did not finish.

    data.cache_dir must be new, empty or a myxtts cache: a folder of other files is refused, and so is a cache of
    other parameters unless --rebuild is given."""
    from myxtts.data.prepare import prepare

    cfg = load(config_path, overrides)
    result = prepare(cfg, force=force, progress=not no_progress, echo=click.echo, workers=workers,
                     lock_timeout=lock_timeout, rebuild=rebuild)
    click.echo(result.summary())


@click.command("stats")
@config_option()
@override_option()
@click.option("--shapes", type=click.IntRange(min=1), default=None,
              help="Number of bucket shapes to plan (default: data.num_buckets).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@clean_errors
def stats_command(config_path: str, overrides: tuple[str, ...], shapes: int | None, as_json: bool) -> None:
    """Length percentiles of the prepared cache, suggested max_* and bucket boundaries with their fill."""
    from myxtts.data.stats import cache_stats, format_stats

    cfg = load(config_path, overrides)
    report = cache_stats(cfg, shapes=shapes)
    click.echo(json.dumps(report, indent=2) if as_json else format_stats(report))


@click.command("data-service")
@click.argument("role", type=click.Choice(["dispatcher", "worker"]))
@click.option("--port", type=click.IntRange(min=0, max=65535), default=5050, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--dispatcher", "dispatcher_address", default=None,
              help="worker: HOST:PORT of the dispatcher to register with.")
@click.option("--listen-on-all-interfaces", "all_interfaces", is_flag=True,
              help="Required: TensorFlow's tf.data service servers listen on every network interface (TF has no "
                   "bind address), and anyone who reaches the port can run any dataset graph as this user; pass it "
                   "once the port is firewalled to your cluster.")
@clean_errors
def data_service_command(role: str, port: int, dispatcher_address: str | None, all_interfaces: bool) -> None:
    """Run a tf.data service dispatcher or worker until interrupted (for data.service_address).

    Workers must see the prepared cache at the same absolute path as the trainer's config. The server listens on
    every interface and takes no credentials: start it only behind a firewall, with --listen-on-all-interfaces.
    """
    from myxtts.data.service import start_dispatcher, start_worker

    if not all_interfaces:
        raise InputError(f"myxtts data-service {role} would listen on port {port} of every network interface "
                         "(TensorFlow's tf.data service has no bind address) with no credentials: anyone who reaches "
                         "it can register a dataset graph that its workers run as this user (reading or writing any "
                         "file). Firewall the port to your cluster's machines, then pass --listen-on-all-interfaces.")
    if role == "worker" and not dispatcher_address:
        raise InputError("myxtts data-service worker needs --dispatcher HOST:PORT.")
    server = start_dispatcher(port) if role == "dispatcher" else start_worker(dispatcher_address, port)
    click.echo(f"tf.data service {role} listening on port {port}" + (
        f" (set data.service_address: {server.target})" if role == "dispatcher" else
        f", registered with {dispatcher_address}") + "; Ctrl-C stops it.")
    server.join()


COMMANDS = [prepare_command, stats_command, data_service_command]
