"""Synthesis: compiled free-running decoding (tf.while_loop + KV cache), length policy, run loading."""

from myxtts.synthesis.decoding import STOP_THRESHOLD, CompiledDecoder
from myxtts.synthesis.lengths import LengthPolicy, TextTooLongError
from myxtts.synthesis.loading import (RunError, latest_checkpoint, load_model_from_checkpoint, load_model_from_run,
                                      save_run)
from myxtts.synthesis.synthesizer import SynthesisResult, Synthesizer, write_results

__all__ = ["STOP_THRESHOLD", "CompiledDecoder", "LengthPolicy", "RunError", "SynthesisResult", "Synthesizer",
           "TextTooLongError", "latest_checkpoint", "load_model_from_checkpoint", "load_model_from_run", "save_run",
           "write_results"]
