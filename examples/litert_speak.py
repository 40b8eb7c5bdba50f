"""Speak with a LiteRT export on a device without TensorFlow: ai-edge-litert, numpy, soundfile and myxtts' text
front-end (`pip install ai-edge-litert soundfile`, then myxtts without its TensorFlow extras, or copy
`src/myxtts` beside this script).

    myxtts export --run pretrained/base-real-tiny --out voice-litert --format litert     # on the workstation
    python examples/litert_speak.py voice-litert reference.wav "Any text, of several sentences." out.wav
"""

from __future__ import annotations

import argparse
import sys
import time

import soundfile

from myxtts.litert_voice import LiteRtVoice, read_clip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", help="the folder `myxtts export --format litert` wrote")
    parser.add_argument("reference", help="a clip of the voice (WAV, FLAC, OGG; resampled)")
    parser.add_argument("text")
    parser.add_argument("out", help="the WAV to write")
    parser.add_argument("--speed", type=float, default=1.0, help="> 1 faster, < 1 slower")
    parser.add_argument("--threads", type=int, default=None, help="interpreter threads (default: all cores)")
    args = parser.parse_args()

    voice = LiteRtVoice(args.export, threads=args.threads)
    embedding = voice.speaker_embedding(read_clip(args.reference, voice.sample_rate))  # [1, K, d]: the voice
    started = time.perf_counter()
    waveform = voice.say_long(args.text, embedding, speed=args.speed)  # sentence by sentence
    seconds = time.perf_counter() - started
    soundfile.write(args.out, waveform, voice.sample_rate, subtype="PCM_16")
    duration = len(waveform) / voice.sample_rate
    print(f"wrote {args.out}: {duration:.1f} s of speech in {seconds:.2f} s (real-time factor "
          f"{seconds / duration:.3f}); TensorFlow imported: {'tensorflow' in sys.modules}")


if __name__ == "__main__":
    main()
