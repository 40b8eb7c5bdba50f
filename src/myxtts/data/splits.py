"""Who is kept out of training: the held-out speakers of each corpus (zero-shot development voices) and the
validation clips; and what each corpus brought (``corpus_summaries``, recorded in the manifest). ``prepare`` makes
these choices once per build; they are deterministic, so a rebuild of the same corpus chooses the same."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from myxtts.data.cache_manifest import CacheError
from myxtts.data.corpus import corpus_sources

# a held-out (zero-shot development) speaker's clips: 3 references to average and at least one to judge the voice by
HELD_OUT_MIN_CLIPS = 4


def held_out_speaker_names(cfg: Any, accepted: list[Any], clips: dict[str, Any]) -> list[str]:
    """Per corpus (``data.corpora[].held_out_speakers``), that many speakers kept out: among the speakers with at
    least ``HELD_OUT_MIN_CLIPS`` clips (fewer when none has that many: a held-out voice needs clips to be cloned
    from and judged by), those with the fewest clips (they cost training the least), the longest audio first, ties
    broken by a hash of the name."""
    chosen: list[str] = []
    for index, source in enumerate(corpus_sources(cfg)):
        if not source.held_out_speakers:
            continue
        counts, samples = Counter(), Counter()
        for entry in accepted:
            if entry.corpus == index:
                counts[entry.speaker] += 1
                samples[entry.speaker] += clips[entry.id].samples
        if len(counts) <= source.held_out_speakers:
            raise CacheError(f"data.corpora[{index}].held_out_speakers = {source.held_out_speakers}, but corpus "
                             f"{source.name} has {len(counts)} accepted speaker(s): none would be left to train on.")
        enough = min(HELD_OUT_MIN_CLIPS, max(counts.values()))
        eligible = [speaker for speaker, count in counts.items() if count >= enough]
        ranked = sorted(eligible, key=lambda name: (counts[name], -samples[name],
                                                    hashlib.sha256(name.encode("utf-8")).hexdigest()))
        chosen += ranked[:source.held_out_speakers]
    return chosen


def corpus_summaries(cfg: Any, entries: list[Any], clips: dict[str, Any]) -> list[dict[str, Any]]:
    """Per corpus of the accepted ``entries``: its name, format, weight, utterances, speakers, hours, and the sample
    rates its files were recorded at (read from their headers): a 16-kHz source has nothing above 8 kHz
    (``bandwidth_hz``, the lowest rate's Nyquist frequency, at most the mel's ``audio.fmax``), however it is
    resampled."""
    import soundfile  # read at build time only

    summaries = []
    for index, source in enumerate(corpus_sources(cfg)):
        members = [entry for entry in entries if entry.corpus == index]
        rates: Counter = Counter()
        for entry in members:
            try:
                rates[int(soundfile.info(str(entry.audio_path)).samplerate)] += 1
            except (OSError, RuntimeError):
                rates[0] += 1  # gone since it was processed: the next prepare sees the change
        lowest = min((rate for rate in rates if rate), default=cfg.audio.sample_rate)
        summaries.append({
            "name": source.name, "format": source.format, "path": source.path, "weight": source.weight,
            "utterances": len(members), "speakers": len({entry.speaker for entry in members}),
            "hours": sum(clips[entry.id].samples for entry in members) / cfg.audio.sample_rate / 3600.0,
            "source_sample_rates": {str(rate): count for rate, count in sorted(rates.items())},
            "bandwidth_hz": min(lowest / 2.0, cfg.audio.fmax)})
    return summaries


def validation_ids(ids: list[str], count: int) -> list[str]:
    """``count`` ids held out deterministically: the smallest by a hash of the id (spread over the corpus,
    stable when other clips are added or rejected)."""
    ranked = sorted(ids, key=lambda i: hashlib.sha256(i.encode("utf-8")).hexdigest())
    return ranked[:count]
