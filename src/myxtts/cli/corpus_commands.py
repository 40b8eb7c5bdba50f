"""Corpus commands: `myxtts corpus espeak` renders a synthetic multi-speaker corpus with espeak-ng (the library
bundled by the espeakng-loader wheel); `myxtts corpus transcribe` cuts recordings of one speaker into clips that
Whisper transcribes (myxtts.data.transcribe_corpus)."""

from __future__ import annotations

import click

from myxtts.cli.failures import clean_errors


@click.group("corpus")
def corpus_group() -> None:
    """Build corpora (synthetic multi-speaker data for learning checks)."""


@corpus_group.command("espeak")
@click.option("--transcripts", type=click.Path(dir_okay=False), default=None,
              help="'id|text|normalized' file (LJSpeech metadata layout); default: the 32 bundled transcripts.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output folder: list.txt (data.corpus_format: list) and wavs/<speaker>/<id>.wav.")
@click.option("--sentences", type=click.IntRange(min=2), default=None,
              help="How many sentences to render (a seeded sample; default: all that fit 10-150 characters).")
@click.option("--voices", type=click.IntRange(min=2, max=24), default=4, show_default=True,
              help="How many of the 24 built-in, clearly different espeak-ng voices to use (the first N).")
@click.option("--held-out-voices", is_flag=True,
              help="Render with the 4 voices no base model trains on instead (zero-shot tests of voice cloning).")
@click.option("--exclude", "exclude", multiple=True, type=click.Path(dir_okay=False),
              help="A transcripts / metadata file ('id|text...') whose sentences are left out, by id and by text: keep "
                   "the sentences a model is evaluated on out of its base corpus (repeatable).")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Clips rendered at once (threads, each with its own copy of the bundled espeak-ng library).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sentence sample and voice assignment.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@clean_errors
def espeak_command(transcripts: str | None, out_dir: str, sentences: int | None, voices: int, held_out_voices: bool,
                   exclude: tuple[str, ...], jobs: int, seed: int, no_progress: bool) -> None:
    """Render sentences with several espeak-ng voices into a list corpus (each voice speaks its own share)."""
    from myxtts.data.espeak_corpus import (HELD_OUT_VOICES, bundled_sentences, read_transcripts, render_corpus,
                                           select_sentences)

    source = read_transcripts(transcripts) if transcripts else bundled_sentences()
    if exclude:
        left_out = [sentence for path in exclude for sentence in read_transcripts(path)]
        ids, texts = {s.id for s in left_out}, {s.text.lower() for s in left_out}
        kept = [s for s in source if s.id not in ids and s.text.lower() not in texts]
        click.echo(f"left out {len(source) - len(kept)} of {len(source)} sentences ({', '.join(exclude)})")
        source = kept
    chosen = select_sentences(source, sentences, seed=seed)
    result = render_corpus(chosen, list(HELD_OUT_VOICES) if held_out_voices else voices, out_dir, jobs=jobs,
                           seed=seed, progress=not no_progress)
    click.echo(result.summary())
    click.echo(f"train on it with: data.corpus_format: list, data.corpus_path: {result.list_file}")


@corpus_group.command("transcribe")
@click.argument("recordings", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output folder (new, empty, or this command's earlier output): list.txt, wavs/, rejected.csv.")
@click.option("--speaker", default="speaker", show_default=True, help="The speaker name written in list.txt.")
@click.option("--min-seconds", type=float, default=2.0, show_default=True, help="Shortest clip.")
@click.option("--max-seconds", type=float, default=10.0, show_default=True, help="Longest clip.")
@click.option("--min-confidence", type=click.FloatRange(0.0, 1.0), default=0.5, show_default=True,
              help="A clip whose words' mean Whisper probability is lower is rejected (low_confidence).")
@click.option("--whisper-model", default=None,
              help="A Whisper model name (tiny.en, base.en, small.en, ...) or a CTranslate2 model folder; default "
                   "$MYXTTS_WHISPER_MODEL or tiny.en. Larger models transcribe better and slower.")
@clean_errors
def transcribe_command(recordings: tuple[str, ...], out_dir: str, speaker: str, min_seconds: float,
                       max_seconds: float, min_confidence: float, whisper_model: str | None) -> None:
    """Cut recordings of one speaker (no transcripts) into 2-10 s clips at pauses, transcribed by Whisper: a list
    corpus for `myxtts prepare` (data.corpus_format: list)."""
    from myxtts.data.transcribe_corpus import transcribe_recordings
    from myxtts.evaluation.whisper_listener import WhisperListener

    listener = WhisperListener(whisper_model)
    result = transcribe_recordings(recordings, out_dir, listener, speaker=speaker, min_seconds=min_seconds,
                                   max_seconds=max_seconds, min_confidence=min_confidence, echo=click.echo)
    click.echo(result.summary())
    click.echo(f"prepare it with: --set data.corpus_format=list --set data.corpus_path={result.list_file}")


COMMANDS = [corpus_group]
