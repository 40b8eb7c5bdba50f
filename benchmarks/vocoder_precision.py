"""The vocoder's GAN step in float32 and with bfloat16 discriminators (``training.mixed_precision``), in one process.

Both steps are the trainer's own (``GanSteps.adversarial_step`` compiled with the segments' signature), built from the
same config and the same starting weights, fed the same real segments of a prepared cache. Modes alternate in
``--rounds`` rounds of ``--steps`` steps each (after one untimed warm-up call each); per round the seconds per step,
and the float32 / bfloat16 ratio paired round by round. Whether bfloat16 helps depends on the CPU: matrix units for
bfloat16 (AMX, listed in the JSON's ``cpu_flags``) make it faster; without them it can be slower.

Run: ``.venv/bin/python benchmarks/vocoder_precision.py --config configs/vocoder-ljspeech-mini-stage2.yaml
--json docs/benchmarks/vocoder-precision.json`` (the config's cache must be prepared).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: the process settings TensorFlow reads at import)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import paired_ratios, spread, tensorflow_environment, write_report  # noqa: E402
from myxtts.machine import machine  # noqa: E402

MODES = ("float32", "bfloat16")


def build_steps(cfg, precision: str, weights: dict | None):
    """(the GAN steps, generator, discriminators) for one precision; ``weights`` copied in if given."""
    from myxtts.training.vocoder_steps import GanSteps
    from myxtts.vocoder.discriminators import build_discriminators
    from myxtts.vocoder.generators import build_generator

    cfg = cfg.replace(training=dataclasses.replace(cfg.training, mixed_precision=precision))
    generator, discriminators = build_generator(cfg), build_discriminators(cfg)
    if weights is not None:
        generator.set_weights(weights["generator"])
        discriminators.set_weights(weights["discriminators"])
    steps = GanSteps(cfg, generator, discriminators)
    return steps, generator, discriminators


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="A vocoder config whose cache is prepared.")
    parser.add_argument("--rounds", type=int, default=5, help="Alternated rounds per mode.")
    parser.add_argument("--steps", type=int, default=5, help="Timed adversarial steps per round.")
    parser.add_argument("--json", help="Write the report here.")
    args = parser.parse_args()

    import tensorflow as tf

    from myxtts.config import load_config
    from myxtts.data.vocoder_segments import VocoderSegments

    cfg = load_config(args.config)
    segments = VocoderSegments(cfg, "train")
    iterator = iter(segments.dataset())
    batches = [next(iterator) for _ in range(args.steps)]
    compiled, weights = {}, None
    for mode in MODES:
        steps, generator, discriminators = build_steps(cfg, mode, weights)
        if weights is None:
            weights = {"generator": generator.get_weights(), "discriminators": discriminators.get_weights()}
        function = tf.function(steps.adversarial_step, input_signature=[segments.signature()], autograph=False)
        first = time.perf_counter()
        function(batches[0])["total"].numpy()  # the trace and TF's graph optimisation, untimed below
        compiled[mode] = function
        print(f"{mode}: first call (trace + graph optimisation) {time.perf_counter() - first:.1f} s", flush=True)

    seconds = {mode: [] for mode in MODES}
    for round_index in range(args.rounds):
        for mode in MODES if round_index % 2 == 0 else reversed(MODES):
            began = time.perf_counter()
            for batch in batches:
                losses = compiled[mode](batch)
            losses["total"].numpy()
            seconds[mode].append((time.perf_counter() - began) / len(batches))
        print(f"round {round_index + 1}: " + ", ".join(f"{m} {seconds[m][-1]:.3f} s/step" for m in MODES), flush=True)
    ratio = paired_ratios(seconds["float32"], seconds["bfloat16"])
    print(f"float32 / bfloat16 seconds per step: median {ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})")
    v = cfg.vocoder
    report = {"benchmark": "vocoder_precision", "config": args.config, "machine": machine(),
              "environment": tensorflow_environment(), "rounds": args.rounds, "steps_per_round": args.steps,
              "batch": {"segments": v.batch_size, "segment_samples": v.segment_samples,
                        "discriminator_update": v.discriminator_update},
              "seconds_per_step": {mode: {**spread(values), "per_round": values} for mode, values in seconds.items()},
              "float32_over_bfloat16": ratio}
    write_report(report, args.json)


if __name__ == "__main__":
    main()
