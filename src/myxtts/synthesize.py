"""Public entry point of synthesis (docs/architecture.md): ``from myxtts.synthesize import Synthesizer``.

The implementation lives in ``myxtts.synthesis`` (decoding, lengths, loading, synthesizer).
"""

from myxtts.synthesis import (STOP_THRESHOLD, CompiledDecoder, LengthPolicy, RunError, SynthesisResult, Synthesizer,
                              TextTooLongError, latest_checkpoint, load_model_from_checkpoint, load_model_from_run,
                              save_run, write_results)

__all__ = ["STOP_THRESHOLD", "CompiledDecoder", "LengthPolicy", "RunError", "SynthesisResult", "Synthesizer",
           "TextTooLongError", "latest_checkpoint", "load_model_from_checkpoint", "load_model_from_run", "save_run",
           "write_results"]
