"""What ``myxtts prepare`` returns: the cache it built, updated or reused, why, and the summary it prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from myxtts.cache_files import REJECTED_FILE
from myxtts.data.corpus import Rejection


@dataclass
class PrepareResult:
    """One ``prepare``: its cache, whether it was reused as it was, why it was built, the manifest, the rejected
    clips and how long it took; ``summary`` is what ``myxtts prepare`` prints."""

    cache_dir: Path
    reused: bool  # True: nothing changed, the cache was used as it is
    reason: str  # why the cache was rebuilt or updated ("" when reused)
    manifest: dict[str, Any]
    rejections: list[Rejection] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        m = self.manifest
        lines = []
        if self.reused:
            lines.append(f"Cache is up to date (feature hash {m['feature_hash']}, corpus fingerprint "
                         f"{m['corpus_fingerprint']}); reused {self.cache_dir} in {self.seconds:.2f} s.")
        else:
            update = m["update"]
            rate = f", {update['clips_per_second']:.1f} clips/s on {update['workers']} thread(s)" \
                if update["clips_per_second"] else ""
            lines.append(f"Built cache {self.cache_dir} in {self.seconds:.1f} s (feature hash {m['feature_hash']}; "
                         "mel stored as float16).")
            resumed = update.get("resumed", 0)
            lines.append(f"clips: {update['processed']} processed ({update['added']} new, {update['changed']} "
                         f"changed{rate}), {update['reused'] - resumed} reused unchanged, {update['removed']} removed"
                         + (f", {resumed} resumed (finished by a prepare that was stopped)" if resumed else ""))
        lines.append(f"accepted: {m['counts']['accepted']} utterances ({m['hours']:.3f} h; train "
                     f"{len(m['splits']['train'])}, validation {len(m['splits']['validation'])}), "
                     f"speakers: {len(m['speakers'])}, languages: {', '.join(m['languages'])}")
        by_reason = m["counts"]["rejected_by_reason"]
        lines.append(f"rejected: {m['counts']['rejected']}" + (
            " (" + ", ".join(f"{reason}: {count}" for reason, count in sorted(by_reason.items())) + ")"
            if by_reason else ""))
        if m["counts"]["rejected"]:
            lines.append(f"see {self.cache_dir / REJECTED_FILE} for every rejected line and why")
        single = m["counts"]["single_clip"]
        if single["clips"]:
            lines.append(f"single-clip speakers: {single['speakers']} speaker(s), {single['clips']} clip(s) "
                         + SINGLE_CLIP_USE[m.get("single_clip_policy", "skip")])
        held_out = m.get("held_out_speakers", [])
        if held_out:
            lines.append(f"held-out speakers: {len(held_out)} ({len(m['splits'].get('held_out', []))} clips) kept "
                         "out of training and validation (the manifest's 'held_out' split)")
        for corpus in m.get("corpora", []):
            rates = (f"recorded at {', '.join(f'{r} Hz' for r in corpus['source_sample_rates'])} (bandwidth "
                     f"{corpus['bandwidth_hz']:g} Hz)")
            lines.append(f"  corpus {corpus['name']} ({corpus['format']}, weight {corpus['weight']:g}): "
                         f"{corpus['utterances']} utterances, {corpus['hours']:.2f} h, {corpus['speakers']} speakers, "
                         f"{rates}" if corpus["name"] else f"source audio {rates}")
        return "\n".join(lines)


SINGLE_CLIP_USE = {"skip": "not trained on (no other clip of the speaker to use as reference; kept in the cache; "
                           "data.single_clip_policy: slice trains on them)",
                   "slice": "trained with a slice of the clip itself as the reference, its frames not scored "
                            "(data.single_clip_policy: slice)"}
