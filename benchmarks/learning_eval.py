"""The measurements and the plot of ``benchmarks/learning.py`` (one evaluation point of one checkpoint).

Everything is measured on sentences the model never trained on (the run's validation split, ``data.validation_size``
clips chosen by ``prepare``) and, for context, on a few training sentences:

- ``cer``: pocketsphinx's corpus character error rate of the free-running synthesis (Griffin-Lim vocoder);
- ``speaker_similarity``: Resemblyzer cosine between each output and the mean embedding of the *other* held-out
  real clips of its speaker (leave-one-out, the definition ``speaker_encoder.reference_similarity`` uses for the
  recordings and their Griffin-Lim resynthesis, so the three figures compare);
- ``duration_error``: |synthesized frames - real frames| / real frames, per sentence, averaged;
- ``focus_rate``: the aligner's soft alignment on the real held-out clips (teacher-forced model call,
  ``outputs["alignments"]``, mean over frames of the largest weight); the synthesis alignment is the hard one
  from the predicted durations (always 1) for both decoders;
- ``mcd_dtw_db`` against the recording, and ``ended_by`` (durations / maximum length).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

FOCUS_NOTE = ("focus_rate: mean max of the aligner's soft alignment on the real held-out clips (teacher-forced model "
              "call, outputs['alignments']); the synthesis alignment is the hard one from predicted durations, so its "
              "focus would be 1 by construction")


def evaluation_sets(cfg, train_count: int):
    """(training sentences, held-out sentences, every entry, source): the held-out ones are the whole validation
    split of the run's cache; the training ones spread over speakers (round-robin)."""
    from myxtts.evaluation.evaluate import corpus_entries

    held_out, pool, source = corpus_entries(cfg, None)
    held_ids = {entry.id for entry in held_out}
    training = [e for e in pool if e.id not in held_ids]
    by_speaker = [[e for e in training if e.speaker == s] for s in sorted({e.speaker for e in training})]
    interleaved = [clips[i] for i in range(max(map(len, by_speaker))) for clips in by_speaker if i < len(clips)]
    return interleaved[:train_count], held_out, pool, source


def held_out_sets(cfg, full_corpus: Path, held_ids: list[str], train_count: int):
    """``evaluation_sets`` when the training folder holds only the training clips (``--train-clips``): the held-out
    clips (``held_ids``) and the reference pool come from the full corpus."""
    from myxtts.data.corpus import read_config_corpus, read_corpus

    pool = read_corpus(full_corpus, "ljspeech", cfg.data.language).entries
    trained = {e.id for e in read_config_corpus(cfg).entries}
    held = set(held_ids)
    training = [e for e in pool if e.id in trained][:train_count]
    return training, [e for e in pool if e.id in held], pool, f"{len(held)} clips of {full_corpus} not in training"


class SpeakerJudge:
    """Resemblyzer embeddings of the held-out real clips, per speaker; scores an output of a sentence against the
    mean of its speaker's other held-out clips."""

    def __init__(self, held_out, rate: int):
        from myxtts.audio import load_audio
        from myxtts.evaluation.speaker_encoder import voice_embedding

        self.rate = rate
        self.embeddings = {}  # speaker -> {id: embedding}
        for entry in held_out:
            wave = load_audio(entry.audio_path, rate)
            self.embeddings.setdefault(entry.speaker, {})[entry.id] = voice_embedding(wave, rate)

    def score(self, entry, wave: np.ndarray) -> float | None:
        from myxtts.evaluation.speaker_encoder import voice_embedding

        others = [v for key, v in self.embeddings.get(entry.speaker, {}).items() if key != entry.id]
        if not others:
            return None
        centroid = np.mean(np.stack(others), axis=0)
        centroid /= max(float(np.linalg.norm(centroid)), 1e-12)
        output = voice_embedding(wave, self.rate)
        norm = float(np.linalg.norm(output))
        return float(np.dot(output, centroid) / norm) if norm > 0 else 0.0


def ceiling(cfg, entries, similarity: bool) -> dict:
    """CER (and Resemblyzer similarity, leave-one-out per speaker) of the recordings and of their mel +
    Griffin-Lim resynthesis: what a perfect mel can reach through this vocoder."""
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.evaluation.listening_measures import listen
    from myxtts.evaluation.speaker_encoder import reference_similarity
    from myxtts.vocoder import GriffinLim

    rate, frontend, vocoder = cfg.audio.sample_rate, MelFrontend(cfg.audio), GriffinLim(cfg.audio)
    waves = [load_audio(e.audio_path, rate) for e in entries]
    texts = [e.text for e in entries]
    out = {"recordings_cer": listen(waves, texts, rate)["cer"],
           "griffin_lim_cer": listen([np.asarray(vocoder(frontend(w))) for w in waves], texts, rate)["cer"]}
    if similarity:
        real, griffin_lim = [], []
        for speaker in sorted({e.speaker for e in entries}):
            clips = [w for e, w in zip(entries, waves) if e.speaker == speaker]
            if len(clips) >= 2:
                scores = reference_similarity(clips, rate, cfg.audio)
                real += scores.real.scores
                griffin_lim += scores.griffin_lim.scores
        out.update(recordings_similarity=float(np.mean(real)) if real else None,
                   griffin_lim_similarity=float(np.mean(griffin_lim)) if griffin_lim else None)
    return out


def synthesize(synthesizer, entries, references, batch_size: int):
    """Free-running synthesis of each entry's text with the matching reference clip; results with waveforms."""
    voices = [synthesizer.voice(reference.audio_path) for reference in references]
    return synthesizer.synthesize([e.text for e in entries], voices=voices, batch_size=batch_size)


def teacher_forced_focus(synthesizer, entries, pool, batch_size: int) -> list[float]:
    """Focus rate of the model's alignment (``outputs["alignments"]`` of a teacher-forced call) on each entry's
    real clip; one compiled shape (the set's longest text and mel, ``batch_size`` rows)."""
    import tensorflow as tf

    from myxtts.audio import load_audio
    from myxtts.data.corpus import pick_reference
    from myxtts.evaluation.metrics import focus_rate
    from myxtts.text import PAD_ID

    r, rate = synthesizer.cfg.model.reduction_factor, synthesizer.sample_rate
    # a batched teacher-forced call on the model itself: the synthesizer engine's input steps give its inputs
    tokens = synthesizer.engine.encode([e.text for e in entries])
    mels = [synthesizer.mel_stats.normalize(synthesizer.frontend(load_audio(e.audio_path, rate)).numpy())
            for e in entries]
    references = [synthesizer.engine.reference_mel(pick_reference(e, pool).audio_path) for e in entries]
    text_len, step = max(map(len, tokens)), 8 * r
    frames = -(-max(m.shape[0] for m in mels) // step) * step
    function = tf.function(lambda batch: synthesizer.model(batch, training=False)["alignments"])
    scores = []
    for start in range(0, len(entries), batch_size):
        rows = [min(start + i, len(entries) - 1) for i in range(batch_size)]  # the last batch repeats its last item
        batch = {"tokens": np.full([batch_size, text_len], PAD_ID, np.int32),
                 "token_lengths": np.array([len(tokens[i]) for i in rows], np.int32),
                 "mel": np.zeros([batch_size, frames, mels[0].shape[1]], np.float32),
                 "mel_lengths": np.array([mels[i].shape[0] for i in rows], np.int32),
                 "reference_mel": np.stack([references[i][0] for i in rows]),
                 "reference_lengths": np.array([references[i][1] for i in rows], np.int32),
                 "speaker_ids": np.zeros([batch_size], np.int32)}
        for slot, i in enumerate(rows):
            batch["tokens"][slot, : len(tokens[i])] = tokens[i]
            batch["mel"][slot, : mels[i].shape[0]] = mels[i]  # zero padding after normalising, as the pipeline
        alignments = function({k: tf.constant(v) for k, v in batch.items()}).numpy()  # [B, frames, T_text]
        for slot, i in enumerate(rows[: min(batch_size, len(entries) - start)]):
            scores.append(focus_rate(alignments[slot, : mels[i].shape[0], : len(tokens[i])]))
    return scores


def measure(synthesizer, entries, pool, judge: SpeakerJudge | None, batch_size: int) -> dict:
    """One split's figures at one checkpoint: means, then per-sentence items."""
    from myxtts.audio import load_audio
    from myxtts.data.corpus import pick_reference
    from myxtts.evaluation.listening_measures import listen
    from myxtts.evaluation.metrics import mel_cepstral_distortion

    rate = synthesizer.sample_rate
    results = synthesize(synthesizer, entries, [pick_reference(e, pool) for e in entries], batch_size)
    heard = listen([r.waveform for r in results], [e.text for e in entries], rate)
    forced = teacher_forced_focus(synthesizer, entries, pool, batch_size)
    items = []
    for entry, result, listened, tf_focus in zip(entries, results, heard["items"], forced):
        real = load_audio(entry.audio_path, rate)
        real_frames = int(synthesizer.frontend(real).shape[0])
        item = {"id": entry.id, "speaker": entry.speaker, "cer": listened["cer"], "heard": listened["heard"],
                "real_frames": real_frames, "synthesized_frames": result.frames,
                "duration_error": abs(result.frames - real_frames) / real_frames,
                "mcd_dtw_db": mel_cepstral_distortion(real, result.waveform, rate), "ended_by": result.ended_by,
                "focus_rate": tf_focus, "speaker_similarity": judge.score(entry, result.waveform) if judge else None}
        items.append(item)
    keys = ("duration_error", "mcd_dtw_db", "focus_rate", "speaker_similarity")
    means = {}
    for key in keys:
        values = [item[key] for item in items if item.get(key) is not None]
        means[key] = float(np.mean(values)) if values else None
    return {"cer": heard["cer"], **means, "sentences": len(items),
            "ended_by": dict(Counter(item["ended_by"] for item in items)), "items": items}


def voice_match(synthesizer, held_out, pool, texts: int, batch_size: int) -> dict | None:
    """Multi-speaker corpora: held-out texts spoken with a reference clip of every voice; is each output nearest
    its voice (pitch + cepstral embedding, ``listening_measures.speaker_match``; absolute and per-text relative)?"""
    from myxtts.audio import load_audio
    from myxtts.evaluation.listening_measures import speaker_match

    speakers = sorted({e.speaker for e in pool})
    held_ids = {e.id for e in held_out}
    clips = {s: [e for e in pool if e.speaker == s and e.id not in held_ids] for s in speakers}
    usable = [s for s in speakers if len(clips[s]) >= 4]  # 3 for the centroid, 1 as the reference
    if len(usable) < 2:
        return None
    chosen = held_out[:texts]
    pairs = [(entry, speaker) for speaker in usable for entry in chosen]
    results = synthesize(synthesizer, [entry for entry, _ in pairs], [clips[s][3] for _, s in pairs], batch_size)
    outputs = [(speaker, result.waveform) for (_, speaker), result in zip(pairs, results)]
    rate = synthesizer.sample_rate  # centroids from Griffin-Lim resynthesis: the vocoder's colouring on both sides
    references = {s: [np.asarray(synthesizer.vocoder(synthesizer.frontend(load_audio(e.audio_path, rate))))
                      for e in clips[s][:3]] for s in usable}
    return {"share": speaker_match(outputs, references, rate),
            "relative_share": speaker_match(outputs, references, rate, groups=[entry.id for entry, _ in pairs]),
            "chance": 1.0 / len(usable), "voices": usable, "texts": len(chosen)}


def plot(report: dict, path: Path) -> None:
    """CER, speaker similarity, duration error and focus rate against training minutes; one colour per seed,
    held-out solid, training sentences dashed, the recordings' / Griffin-Lim figures as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    focus_label = "aligner focus, teacher-forced (held-out clips)"
    panels = [("cer", "character error rate (pocketsphinx)", "cer"),
              ("speaker_similarity", "speaker similarity (Resemblyzer cosine)", "similarity"),
              ("duration_error", "duration error |synth - real| / real frames", None),
              ("focus_rate", focus_label, None)]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for axis, (key, label, ceiling_key) in zip(axes, panels):
        for index, run in enumerate(report["runs"]):
            minutes = [p["training_minutes"] for p in run["points"]]
            color = colors[index % len(colors)]
            for split, style, alpha in (("held_out", "o-", 1.0), ("train", "s--", 0.45)):
                values = [p[split][key] if p.get(split) and p[split][key] is not None else np.nan
                          for p in run["points"]]
                if minutes and not all(np.isnan(values)):
                    arm = f"{run['arm']} " if run.get("arm") and len(report.get("arms", [])) > 1 else ""
                    axis.plot(minutes, values, style, color=color, alpha=alpha,
                              label=f"{arm}seed {run['seed']} {split.replace('_', '-')}")
        held = report["ceiling"]["held_out"]
        if ceiling_key and held.get(f"recordings_{ceiling_key}") is not None:
            axis.axhline(held[f"recordings_{ceiling_key}"], color="gray", linestyle=":", label="recordings (held-out)")
            axis.axhline(held[f"griffin_lim_{ceiling_key}"], color="gray", linestyle="-.",
                         label="Griffin-Lim resynthesis (held-out)")
        axis.set_xlabel("training minutes")
        axis.set_xlim(left=0)
        axis.set_ylabel(label)
        top = axis.get_ylim()[1]  # keep 0 in view so a flat curve looks flat
        axis.set_ylim(0, max(1.05, top) if key != "duration_error" else max(0.5, top))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=6)
    clips = f" (first {report['train_clips']} clips)" if report.get("train_clips") else ""
    arms = [arm for arm in report.get("arms", []) if arm != "finetune"]
    against = " vs ".join("from scratch" if arm == "scratch" else ", ".join(report.get("variant_set") or [arm])
                          for arm in arms)
    start = f", fine-tuned from {Path(report['init_from']).name}" + (f" vs {against}" if against else "") \
        if report.get("init_from") else ""
    figure.suptitle(f"learning on {report['corpus']}{clips}: {report['decoder']} decoder, "
                    f"{report['config']['model']['preset']} preset, {report['held_out']['count']} held-out "
                    f"sentences{start}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
