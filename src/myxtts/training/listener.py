"""Listening while training: at each validation, a few fixed validation sentences synthesised free-running.

``Listener.create`` picks ``training.listen_sentences`` validation utterances once (cache order, one per speaker
first): cached tokens, the transcript (corpus metadata, for the CER) and a reference, the next utterance of the
same speaker (its cached log mel, centre-cropped, normalised). A synthesiser on the model being trained decodes them
as one batch, built by the ``synthesizer`` the trainer was given (``myxtts.synthesis.Synthesizer``: the commands give
it; training sits below no synthesis code, so the caller hands the listener what it needs); ``warm_up`` creates every compiled function that batch can use, has the trainer watch them and
traces them once. Each call logs audio (Griffin-Lim), mel and alignment to ``tensorboard/listening`` and a
``listening`` record (frames, pocketsphinx transcript and CER when installed, ``traces_after_warmup``) to
metrics.jsonl. A parallel decoder whose early durations exceed data.max_mel_frames is heard cut there."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.data.cache import FeatureCache
from myxtts.data.corpus import read_config_corpus
from myxtts.data.mel_stats import reference_crop
from myxtts.evaluation import listening_measures
from myxtts.training.reporting import MetricsLog, summary_image


@dataclass
class Sentence:
    id: str
    tokens: np.ndarray  # [tokens] int32, bos + ids + eos, as trained on
    text: str | None  # the transcript (None: not found in the corpus metadata: no CER)
    reference_id: str
    reference_mel: np.ndarray  # [reference_frames, n_mels] normalised
    reference_length: int


def choose_rows(rows: np.ndarray, speaker_ids: np.ndarray, count: int) -> list[int]:
    """``count`` of ``rows`` in their order, one per speaker first (several voices), then the rest in order."""
    first: dict[int, int] = {}
    for row in rows:
        first.setdefault(int(speaker_ids[row]), int(row))
    chosen = list(first.values())
    return (chosen + [int(row) for row in rows if int(row) not in chosen])[:count]


def reference_row(row: int, speaker_ids: np.ndarray) -> int:
    """Another utterance of the row's speaker: the next in cache order (wrapping), else the row itself."""
    others = np.flatnonzero((speaker_ids == speaker_ids[row]) & (np.arange(len(speaker_ids)) != row))
    later = others[others > row]
    return int(later[0]) if later.size else int(others[0]) if others.size else row


class Listener:
    def __init__(self, cfg: Any, synthesizer: Any, sentences: list[Sentence]) -> None:
        self.cfg, self.synthesizer, self.sentences = cfg, synthesizer, sentences
        self.traced = 0  # the synthesizer's tracing count after warm-up

    @classmethod
    def create(cls, cfg: Any, model: Any, vocabulary: Any, mel_stats: Any, pipeline: Any, chief: bool,
               synthesizer: Callable[..., Any] | None, echo: Callable[[str], None] = print) -> "Listener | None":
        """``synthesizer(cfg, model, vocabulary, mel_stats=, batch_size=, truncate_long=)`` builds what decodes the
        sentences (``myxtts.synthesis.Synthesizer``). None without listen_sentences, validation split, chief or
        ``synthesizer``, or under a distribution strategy."""
        t = cfg.training
        if not t.listen_sentences or not chief:
            return None
        if synthesizer is None:
            echo("listening: skipped (this trainer was given no synthesizer to listen with; the train command gives "
                 "one); training.listen_sentences: 0 says so in the config")
            return None
        if t.distribution != "none" or pipeline is None:
            why = f"training.distribution is {t.distribution!r}" if pipeline is not None else "no validation split"
            echo(f"listening: skipped ({why}); training.listen_sentences needs distribution 'none' and validation")
            return None
        cache = FeatureCache.load(cfg)
        # the pipeline's rows index the cache (both of its sources take the cache index's ids)
        chosen = choose_rows(pipeline.rows, cache.speaker_ids, t.listen_sentences)
        try:  # the transcripts, for the CER (the cache holds tokens only)
            entries = read_config_corpus(cfg).entries
            texts = {entry.id: entry.text for entry in entries}
        except (OSError, ValueError) as err:
            texts = {}
            echo(f"listening: no transcripts, so no CER ({cfg.corpus_path} cannot be read: {err})")
        sentences = []
        for row in chosen:
            other = reference_row(row, cache.speaker_ids)
            mel, length = reference_crop(cache.utterance_mel(other), cfg.data.reference_frames, mel_stats)
            sentences.append(Sentence(cache.ids[row], cache.utterance_tokens(row).copy(), texts.get(cache.ids[row]),
                                      cache.ids[other], mel, length))
        # an early duration predictor asks for far too many frames: hear the cut output
        decoding = synthesizer(cfg, model, vocabulary, mel_stats=mel_stats, batch_size=len(sentences),
                               truncate_long=True)
        echo(f"listening: {len(sentences)} validation sentence(s) synthesised free-running at each validation: "
             + ", ".join(f"{s.id} (voice of {s.reference_id})" for s in sentences))
        return cls(cfg, decoding, sentences)

    def warm_up(self, watch: Callable[[Any, str], Callable]) -> float:
        """Create the compiled functions the batch can use, wrap each in ``watch(function, name)`` (the trainer's
        trace accounting), trace and run them once; returns the seconds taken."""
        started = time.perf_counter()
        synthesizer, decoder = self.synthesizer, self.synthesizer.decoder
        batch = len(self.sentences)
        bucket = synthesizer.lengths.text_bucket(max(len(s.tokens) for s in self.sentences))
        # the voices' latents; one duration function; a decode function per mel bucket (lengths vary)
        decoder.latents_function(batch)
        decoder.durations_function(batch, bucket)
        for frames in decoder.buckets:
            decoder.decode_function(batch, frames)
        for key, function in decoder.latents_functions.items():
            decoder.latents_functions[key] = watch(function, f"listening_latents[batch {key}]")
        tables = {"durations": decoder.duration_functions, "decode": decoder.decode_functions}
        for kind, table in tables.items():
            for key, function in table.items():
                table[key] = watch(function, f"listening_{kind}[batch {key[0]} x {key[1]}]")
        synthesizer.warm_up(bucket, batch_size=batch)
        self.traced = synthesizer.tracing_count()
        return time.perf_counter() - started

    def __call__(self, step: int, metrics: MetricsLog) -> dict[str, Any]:
        """Synthesise, vocode, transcribe and log the sentences; returns the metrics.jsonl record."""
        started = time.perf_counter()
        sentences, synthesizer, rate = self.sentences, self.synthesizer, self.cfg.audio.sample_rate
        engine = synthesizer.engine  # its steps: the sentences are cached tokens and reference mels
        # the voices again at every validation: the conditioning encoder trains too
        voices = engine.latents([s.reference_mel for s in sentences],
                                [s.reference_length for s in sentences])  # [sentences, K, d]
        results = engine.decode_tokens([s.tokens for s in sentences], list(voices), batch_size=len(sentences),
                                       texts=[s.text or s.id for s in sentences])
        recognizer, record, pairs = listening_measures.recognizer_available(), {"step": step}, []
        with metrics.writer("listening").as_default(step=step):
            for index, (sentence, result) in enumerate(zip(sentences, results)):
                waveform = engine.vocode(result)  # [samples]
                label = f"{sentence.id}: {sentence.text or ''} (voice of {sentence.reference_id})"
                tf.summary.audio(f"sentence_{index}/audio", waveform[None, :, None], rate, description=label)
                for kind, matrix in (("mel", result.mel), ("alignment", result.alignment)):
                    tf.summary.image(f"sentence_{index}/{kind}", summary_image(matrix), description=label)
                limit = result.frames >= self.cfg.data.max_mel_frames or result.ended_by == "maximum length"
                record.update({f"frames_{index}": result.frames, f"truncated_{index}": int(limit)})
                if recognizer and sentence.text:
                    heard = listening_measures.transcribe(waveform, rate)
                    record.update({f"heard_{index}": heard,
                                   f"cer_{index}": listening_measures.character_error_rate(sentence.text, heard)})
                    pairs.append((sentence.text, heard))
        if pairs:
            record["cer"] = listening_measures.corpus_character_error_rate(*zip(*pairs))
        record.update(seconds=time.perf_counter() - started,
                      traces_after_warmup=synthesizer.tracing_count() - self.traced)
        metrics.write(record, split="listening")
        return record
