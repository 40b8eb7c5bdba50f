"""Synthesis commands: `myxtts synthesize` (text + reference clip -> wav) and `myxtts evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from myxtts.cli.common import vocoder_option
from myxtts.cli.failures import clean_errors
from myxtts.errors import InputError, SetupError


def _synthesizer(run_dir: str | None, checkpoint: str | None, config_path: str | None, batch_size: int,
                 vocoder: str | None, **decoding):
    """The Synthesizer of a run or a checkpoint with ``vocoder`` (None: the run's own, else Griffin-Lim);
    ``decoding``: length_scale (see ``Synthesizer``)."""
    from myxtts.synthesis import RunError, Synthesizer

    if run_dir and checkpoint:
        raise RunError("Give either --run or --checkpoint (with --config), not both.")
    if run_dir:
        return Synthesizer.from_run(run_dir, config=config_path, batch_size=batch_size, vocoder=vocoder, **decoding)
    if checkpoint:
        if not config_path:
            raise RunError("--checkpoint needs --config (the run's config.yaml).")
        return Synthesizer.from_checkpoint(checkpoint, config_path, batch_size=batch_size, vocoder=vocoder,
                                           **decoding)
    raise RunError("Give --run RUN_DIR, or --checkpoint CKPT with --config CFG.")


def _read_texts(text: str | None, text_file: str | None, one_document: bool) -> list[str]:
    """The texts to say: ``--text``, or ``--text-file`` as one document (``one_document``: paragraphs and
    chapters, for one --out file) or one text per non-empty line (for --out-dir)."""
    if (text is None) == (text_file is None):
        raise InputError("Give exactly one of --text or --text-file.")
    if text is not None:
        if not text.strip():
            raise InputError("--text is empty: give the text to synthesize.")
        return [text]
    path = Path(text_file)
    if not path.is_file():
        raise InputError(f"Text file not found: {path}")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"Text file {path} is not valid UTF-8 (at byte {err.start}); re-save it as UTF-8.") from None
    texts = [content] if one_document else [line.strip() for line in content.splitlines()]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise InputError(f"Text file {path} has no text.")
    return texts


@click.command("synthesize")
@click.option("--run", "run_dir", type=click.Path(file_okay=False), help="Training run directory.")
@click.option("--checkpoint", type=click.Path(), help="Checkpoint prefix (e.g. RUN/checkpoints/ckpt-3) or folder.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Config (required with --checkpoint; with --run it replaces the run's config.yaml).")
@click.option("--text", help="Text to synthesize: a sentence or many (split into pieces the model can say).")
@click.option("--text-file", type=click.Path(dir_okay=False),
              help="Text file: with --out the whole file (paragraphs, chapters) as one wav; with --out-dir one wav "
                   "per line.")
@click.option("--reference", "references", required=True, multiple=True, type=click.Path(),
              help="Reference voice clip (any audio format; 3-6 s of speech). Repeat it with more clips of the same "
                   "voice: their speaker latents are averaged.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Output wav (the whole text): new, or a wav an earlier synthesize wrote (any other file is "
                   "refused); written whole or not at all.")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Output folder (001.wav, 002.wav, ...; each new or an earlier synthesize's).")
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Texts decoded together (one compiled graph per batch size and text bucket).")
@click.option("--speed", type=click.FloatRange(min=0.1, max=10.0), default=1.0, show_default=True,
              help="Speaking rate: the predicted durations are divided by it.")
@vocoder_option()
@clean_errors
def synthesize_command(run_dir, checkpoint, config_path, text, text_file, references, out_path, out_dir,
                       batch_size, speed, vocoder_path) -> None:
    """Text + a reference voice clip -> 16-bit WAV at the configured sample rate."""
    from myxtts.outputs import check_output_file
    from myxtts.synthesis import write_numbered_wavs
    from myxtts.synthesis.synthesizer import numbered_wav_paths
    from myxtts.vocoder import write_wav
    from myxtts.vocoder.neural import vocoder_name

    if (out_path is None) == (out_dir is None):
        raise InputError("Give exactly one of --out (one wav for the whole text, split where it must be) or "
                         "--out-dir (one wav per line of --text-file).")
    texts = _read_texts(text, text_file, one_document=out_path is not None)
    missing = [reference for reference in references if not Path(reference).is_file()]
    if missing:
        raise InputError(f"Reference clip not found: {', '.join(missing)}")
    # before the model loads: an existing file is replaced only when an earlier `synthesize` wrote it
    for target, option in ([(out_path, "--out")] if out_path else
                           [(path, "--out-dir") for path in numbered_wav_paths(len(texts), out_dir)]):
        check_output_file(target, "synthesize", option)
    synthesizer = _synthesizer(run_dir, checkpoint, config_path, batch_size, vocoder_path, length_scale=1.0 / speed)
    documents = synthesizer.synthesize_long(texts, list(references))
    rate = synthesizer.sample_rate
    if out_path:
        paths = [write_wav(out_path, documents[0].waveform, rate, made_by="synthesize")]
    else:
        paths = write_numbered_wavs([document.waveform for document in documents], out_dir, rate,
                                    made_by="synthesize")
    for path, document in zip(paths, documents):
        seconds = len(document.waveform) / rate
        compute = sum(r.decode_seconds + r.vocoder_seconds for r in document.results)
        endings = sorted({r.ended_by if r.ended_by != "maximum length" else f"maximum length ({r.frames} frames)"
                          for r in document.results})
        pieces = f"{len(document.pieces)} pieces, " if len(document.pieces) > 1 else ""
        click.echo(f"wrote {path} ({seconds:.2f} s, {pieces}{sum(r.frames for r in document.results)} frames, "
                   f"ended by {', '.join(endings)}, RTF {compute / max(seconds, 1e-9):.3f})")
    click.echo(f"compiled decoder graphs: {synthesizer.tracing_count()} ({sorted(synthesizer.decoder.functions)}); "
               f"vocoder: {vocoder_name(synthesizer.vocoder, vocoder_path)}")


@click.command("evaluate")
@click.option("--run", "run_dir", required=True, type=click.Path(file_okay=False), help="Training run directory.")
@click.option("--data", "data_path", type=click.Path(),
              help="Corpus folder (LJSpeech layout) or list file; default: the run's validation split.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Config replacing the run's.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Evaluate at most N clips.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write the report as JSON here (new, or an earlier evaluate's report; any other file is refused).")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False),
              help="Write mel / alignment PNGs per clip here.")
@vocoder_option()
@clean_errors
def evaluate_command(run_dir, data_path, config_path, limit, json_path, plots_dir, vocoder_path) -> None:
    """MCD-DTW, teacher-forced mel L1, duration error, aligner focus / diagonality, the pitch contour against the
    recordings' (pitch conditioning), real-time factor."""
    from myxtts.evaluation.evaluate import evaluate_run
    from myxtts.locks import lock_run_directory
    from myxtts.outputs import check_output_file

    if json_path:  # before anything is evaluated: never a file evaluate did not write (a run's config.yaml)
        check_output_file(json_path, "evaluate", "--json")
    writes_into_run = [p for p in (json_path, plots_dir) if p and _inside(Path(p), Path(run_dir))]
    lock = lock_run_directory(run_dir) if writes_into_run else None  # a training writing the run excludes us
    try:
        report = evaluate_run(run_dir, data=data_path, config=config_path, limit=limit, plots_dir=plots_dir,
                              vocoder=vocoder_path)
        _write_report(report, json_path)
    finally:
        if lock is not None:
            lock.release()


def _inside(path: Path, directory: Path) -> bool:
    return path.resolve().is_relative_to(directory.resolve())


def _write_report(report: dict, json_path: str | None) -> None:
    from myxtts.evaluation.evaluate import format_report

    click.echo(format_report(report))
    if json_path:
        from myxtts.outputs import FILE_MARK_KEY, MARK_PREFIX, write_file_atomically

        marked = {FILE_MARK_KEY: MARK_PREFIX + "evaluate", **report}  # what a later --json may replace
        write_file_atomically(json_path, lambda handle: handle.write(json.dumps(marked, indent=2).encode("utf-8")))
        click.echo(f"wrote {json_path}")


@click.command("export")
@click.option("--run", "run_dir", required=True, type=click.Path(file_okay=False), help="Training run directory.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="Config replacing the run's.")
@click.option("--force", is_flag=True,
              help="Replace --out if it holds an earlier export, once the new one is complete (never a run or cache).")
@click.option("--format", "export_format", type=click.Choice(["savedmodel", "litert"]), default="savedmodel",
              show_default=True, help="savedmodel: TensorFlow or TF Serving runs it; litert: one .tflite model of "
                                      "built-in ops (phones, a Raspberry Pi: ai-edge-litert runs it, no TensorFlow).")
@click.option("--quantize", type=click.Choice(["none", "float16", "int8"]), default="none", show_default=True,
              help="litert: the weights in float16, or 8-bit (dynamic range), for a smaller model.")
@vocoder_option()
@clean_errors
def export_command(run_dir, out_dir, config_path, force, export_format, quantize, vocoder_path) -> None:
    """A SavedModel of the run's latest checkpoint: signatures speaker_embedding and synthesize (vocoder inside),
    symbol table and mel statistics as assets; TensorFlow alone (or TF Serving) runs it. With --format litert: one
    LiteRT model (speaker_embedding, durations_T per text bucket, decode_F per mel bucket) and its text front-end."""
    if quantize != "none" and export_format != "litert":
        raise click.UsageError("--quantize applies to --format litert only.")
    # --out may not be, hold or lie inside the run, so nothing is written into the run and no run lock is needed
    if export_format == "litert":
        from myxtts.synthesis.litert import MODEL_FILE, export_litert

        written = export_litert(run_dir, out_dir, config=config_path, force=force, vocoder=vocoder_path,
                                quantize=quantize)
        size = (Path(written) / MODEL_FILE).stat().st_size / 1e6
        click.echo(f"wrote LiteRT model {Path(written) / MODEL_FILE} ({size:.1f} MB, built-in ops only, weights "
                   f"{'float32' if quantize == 'none' else quantize}; with litert.json, vocab.json, mel_stats.json, "
                   "config.yaml: myxtts.litert_voice runs it)")
        return
    from myxtts.synthesis.export import export_run

    written = export_run(run_dir, out_dir, config=config_path, force=force, vocoder=vocoder_path)
    vocoder = json.loads((Path(written) / "assets" / "export.json").read_text(encoding="utf-8"))["vocoder"]
    click.echo(f"wrote SavedModel {written} (signatures: speaker_embedding, synthesize with the {vocoder} "
               "vocoder; assets: vocab.json, mel_stats.json, export.json)")


def _voices(specs: tuple[str, ...]) -> dict[str, list[str]]:
    """``NAME=CLIP`` specs -> each name's clips (a name given twice: both clips, their speaker latents averaged)."""
    voices: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, clip = spec.partition("=")
        if not sep or not name.strip() or not clip.strip():
            raise InputError(f"--voice {spec!r}: expected NAME=CLIP (e.g. --voice linda=ref.wav).")
        if not Path(clip).is_file():
            raise InputError(f"--voice {spec!r}: reference clip not found: {clip}")
        voices.setdefault(name.strip(), []).append(clip.strip())
    return voices


# the limits' defaults are ServerLimits' (tested), written out so the CLI starts without importing TensorFlow
@click.command("serve")
@click.option("--run", "run_dir", required=True, type=click.Path(file_okay=False), help="Training run directory.")
@click.option("--voice", "voice_specs", multiple=True, required=True, metavar="NAME=CLIP",
              help="A voice requests can ask for: its name and reference clip (repeat for more voices; a name "
                   "repeated with another clip of the same speaker averages the two).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind (127.0.0.1: this machine only; 0.0.0.0 exposes the server).")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=4, show_default=True,
              help="At most this many sentences (of any requests) decoded together in one compiled call.")
@click.option("--small-batches/--no-small-batches", default=True, show_default=True,
              help="Also compile the powers of two below --batch-size at start-up: fewer queued sentences are "
                   "decoded at the smallest size that holds them, not padded to --batch-size (a longer start-up).")
@click.option("--max-characters", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Longest input a request may send, in characters (400 beyond).")
@click.option("--max-pieces", type=click.IntRange(min=1), default=128, show_default=True,
              help="Most pieces (sentences, or parts of long ones) one request may split into (400 beyond).")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=65536, show_default=True,
              help="Largest request body (413 beyond, decided from Content-Length or while reading).")
@click.option("--header-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Seconds a connection may take to send a request's headers (closed after).")
@click.option("--body-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, help="Seconds a client may take to send its request body (408 after).")
@click.option("--max-requests-in-flight", type=click.IntRange(min=1), default=64,
              show_default=True, help="Requests accepted and not yet finished (429 with Retry-After beyond).")
@click.option("--max-requests-per-client", type=click.IntRange(min=1), default=8, show_default=True,
              help="Requests in flight from one client address (429 with Retry-After beyond): one client's burst "
                   "cannot take the others' places. Behind a reverse proxy every client has its address: raise it "
                   "to --max-requests-in-flight.")
@click.option("--max-queued-pieces", type=click.IntRange(min=1), default=512,
              show_default=True, help="Pieces accepted and not yet delivered, all requests together (429 with "
                                      "Retry-After beyond).")
@click.option("--send-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, help="Seconds one piece's audio may take to reach the client; a client that stops "
                                      "reading is dropped and its pieces freed.")
@click.option("--max-connections", type=click.IntRange(min=1), default=512, show_default=True,
              help="Open connections at once (503 beyond): a flood of idle sockets cannot exhaust the process' file "
                   "descriptors.")
@click.option("--request-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds one request may take in all, text work to last byte: a stream past it is ended and its "
                   "queued pieces dropped (a client reading a little at a time holds it no longer).")
@click.option("--max-unsent-bytes", type=click.IntRange(min=1), default=268435456, show_default=True,
              help="Bytes of audio all streams together may hold not yet sent: a request whose worst case would "
                   "pass it gets 429 with Retry-After before it starts.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A host name clients reach the server by (a DNS name, a proxy's), besides the bind address: "
                   "requests with another Host header, or from another site's page (Origin), get 403 (repeatable).")
@click.option("--shutdown-grace", type=click.FloatRange(min=0), default=20.0, show_default=True,
              help="On SIGTERM or Ctrl-C: stop accepting, give the streams in flight this many seconds to finish, "
                   "cut the rest, exit 0 (a second signal cuts them at once).")
@vocoder_option()
@clean_errors
def serve_command(run_dir, voice_specs, host, port, batch_size, small_batches, max_characters, max_pieces,
                  max_body_bytes, header_timeout, body_timeout, max_requests_in_flight, max_requests_per_client,
                  max_queued_pieces, send_timeout, max_connections, request_timeout, max_unsent_bytes, allowed_hosts, shutdown_grace,
                  vocoder_path) -> None:
    """An HTTP server: OpenAI-compatible POST /v1/audio/speech streamed sentence by sentence, GET /health
    (needs the serve extra: pip install -e '.[serve]'). Every limit is answered in OpenAI's error shape."""
    try:
        from myxtts.synthesis.http import serve
    except ImportError as err:
        raise SetupError(f"myxtts serve needs FastAPI and uvicorn ({err}): pip install -e '.[serve]'.") from None
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.server_limits import ServerLimits
    from myxtts.synthesis.serving import SpeechEngine, small_batch_sizes
    from myxtts.vocoder.neural import vocoder_name

    # before the model loads: ServerLimits checks these options' ranges (and together), an InputError naming one
    limits = ServerLimits(max_body_bytes=max_body_bytes, header_timeout=header_timeout, body_timeout=body_timeout,
                          max_characters=max_characters, max_pieces=max_pieces,
                          max_requests_in_flight=max_requests_in_flight,
                          max_requests_per_client=max_requests_per_client, max_queued_pieces=max_queued_pieces,
                          send_timeout=send_timeout, max_connections=max_connections,
                          request_timeout=request_timeout, max_unsent_bytes=max_unsent_bytes)
    voices = _voices(voice_specs)
    synthesizer = Synthesizer.from_run(run_dir, batch_size=batch_size, vocoder=vocoder_path)
    engine = SpeechEngine(synthesizer, voices, batch_size=batch_size, limits=limits,
                          smaller_batch_sizes=small_batch_sizes(batch_size) if small_batches else ())
    click.echo(f"warm-up: {engine.compiles_at_warmup} compiled functions (batch sizes {engine.batch_sizes}) in "
               f"{engine.warmup_seconds:.1f} s; vocoder {vocoder_name(synthesizer.vocoder, vocoder_path)}; voices "
               f"{sorted(voices)}; serving on http://{host}:{port} (POST /v1/audio/speech, GET /health)")
    try:
        serve(engine, host=host, port=port, shutdown_grace=shutdown_grace, allowed_hosts=allowed_hosts)
    finally:
        engine.close()
    click.echo(f"shut down: {engine.served} pieces served")


@click.command("pack")
@click.option("--run", "run_dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="Training run directory.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder of the packed model (e.g. pretrained/my-voice).")
@click.option("--force", is_flag=True,
              help="Replace --out if it holds an earlier packed model, once the new one is complete (never a run or "
                   "cache).")
@click.option("--with-discriminators", is_flag=True,
              help="Of a vocoder run: keep the discriminators too, so `train-vocoder --init-from` fine-tunes against "
                   "trained ones (synthesis reads the generator alone).")
@click.option("--vocoder", "vocoder_path", default=None,
              show_default="the run's own (RUN/vocoder) if it has one",
              help="Of an acoustic run: the vocoder packed with the model as its own (OUT/vocoder, the generator "
                   "alone), which synthesize, serve, export and evaluate then use by default; griffin-lim: none.")
@clean_errors
def pack_command(run_dir: str, out_dir: str, force: bool, with_discriminators: bool, vocoder_path: str | None) -> None:
    """A run's newest model, without optimizer state, as a folder to ship: synthesize --run and train --init-from
    take it (with its own vocoder, if it has one)."""
    from myxtts.synthesis.run_files import pack_run
    from myxtts.run_dir import RunDir
    from myxtts.vocoder.packing import pack_vocoder

    if RunDir(run_dir).vocoder_record.is_file():  # a `train-vocoder` run: its generator alone
        if vocoder_path is not None:
            raise click.UsageError(f"--vocoder is for an acoustic run; {run_dir} is a vocoder run (it has a "
                                   "vocoder.json).")
        record = pack_vocoder(run_dir, out_dir, force=force, with_discriminators=with_discriminators)
        kept = "generator and discriminators" if with_discriminators else "generator"
        click.echo(f"packed vocoder step {record['step']}, {record['training_minutes']:.1f} training minutes "
                   f"({kept}; {record['parameters']:,} generator parameters, {record['bytes'] / 1e6:.1f} MB) "
                   f"into {out_dir}")
        return
    if with_discriminators:
        raise click.UsageError(f"--with-discriminators is for a vocoder run; {run_dir} is an acoustic run (no "
                               "vocoder.json).")
    record = pack_run(run_dir, out_dir, force=force, vocoder=vocoder_path)
    minutes = "" if record["training_minutes"] is None else f", {record['training_minutes']:.1f} training minutes"
    vocoder = record["vocoder"]
    with_vocoder = f"; its own vocoder from {vocoder['source']}, step {vocoder['step']}, " \
        f"{vocoder['bytes'] / 1e6:.1f} MB" if vocoder else ""
    click.echo(f"packed step {record['step']}{minutes} ({record['parameters']:,} parameters, "
               f"{record['bytes'] / 1e6:.1f} MB of weights{with_vocoder}) into {out_dir}")


COMMANDS = [synthesize_command, evaluate_command, export_command, serve_command, pack_command]
