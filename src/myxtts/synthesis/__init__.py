"""Synthesis: compiled decoding from predicted durations, the synthesis engine's steps, length policy, text splitting,
run loading."""

from myxtts.synthesis.decoding import CompiledDecoder, SynthesisLengthError
from myxtts.synthesis.engine import SynthesisEngine, SynthesisResult
from myxtts.synthesis.lengths import LengthPolicy, TextTooLongError
from myxtts.run_dir import RunError, latest_checkpoint
from myxtts.synthesis.run_files import load_model_from_checkpoint, load_model_from_run, save_run
from myxtts.synthesis.synthesizer import LongSynthesis, Synthesizer, write_numbered_wavs
from myxtts.synthesis.text_split import TextPiece, split_text

__all__ = ["CompiledDecoder", "LengthPolicy", "LongSynthesis", "RunError", "SynthesisEngine", "SynthesisLengthError",
           "SynthesisResult", "Synthesizer", "TextPiece", "TextTooLongError", "latest_checkpoint",
           "load_model_from_checkpoint", "load_model_from_run", "save_run", "split_text", "write_numbered_wavs"]
