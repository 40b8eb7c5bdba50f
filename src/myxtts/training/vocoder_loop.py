"""What the vocoder trainer (``VocoderTrainer.stage_loop``) supplies to the loop skeleton (training/loop.py): its step
(one compiled call of the phase's step) and its periodic actions (metrics with the non-finite guard, resynthesis of
the validation clips, checkpoints); and the error that stops a vocoder run."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from myxtts.config import Config
from myxtts.errors import InputError
from myxtts.training.checkpoint import Checkpoints
from myxtts.training.loop import LoopActions, LoopState, save_checkpoint
from myxtts.training.reporting import MetricsLog, TraceAccounting
from myxtts.training.vocoder_steps import GanSteps


class VocoderTrainingError(InputError):
    """A vocoder run cannot start or go on (bad keys, a run directory in the way, non-finite steps)."""


def training_phase(cfg: Config, step: int) -> str:
    """The generator alone for the first vocoder.adversarial_start_step steps, then the GAN."""
    return "adversarial" if step >= cfg.vocoder.adversarial_start_step else "reconstruction"


@dataclasses.dataclass
class GanActions:
    """The vocoder step and periodic actions, over what the trainer's stages made (``actions()``: for run_loop)."""

    cfg: Config
    steps: GanSteps
    functions: dict[str, Callable[[dict], dict[str, tf.Tensor]]]  # "<phase>_step" -> its compiled (or eager) step
    generate: Callable[[tf.Tensor], tf.Tensor]  # [1, frames, n_mels] log mel -> [1, (frames - 1) * hop] audio
    iterator: Any  # the segments' batches (checkpointed with the model)
    validation: list[dict]  # whole clips ({"id", "mel", "audio"}) resynthesised at each validation
    step: tf.Variable  # [] int64 optimizer steps done: what the checkpoint keeps
    checkpoints: Checkpoints
    trained_seconds: tf.Variable  # checkpointed: training.max_minutes counts every run a resume continues
    traces: TraceAccounting

    def actions(self) -> LoopActions:
        return LoopActions(train_call=self.train_call, log=self.log, checkpoint=self.checkpoint,
                           periodic=self.validate_periodically)

    def train_call(self, loop: LoopState) -> dict[str, tf.Tensor]:
        """One batch through the step of the phase the run is in."""
        out = self.functions[f"{training_phase(self.cfg, loop.step)}_step"](loop.timer.next_batch(self.iterator))
        loop.step += 1
        return out

    def log(self, out: dict[str, tf.Tensor], loop: LoopState) -> None:
        """metrics.jsonl + TensorBoard + the progress bar; the NaN guard's counter is read here (a host read)."""
        t = self.cfg.training
        phase = training_phase(self.cfg, loop.step - 1)  # the step just run
        record = {key: float(value) for key, value in out.items()}
        elapsed = loop.clock.elapsed()
        record.update(step=loop.step, phase=phase, input_wait_share=loop.timer.input_wait_share(elapsed),
                      steps_per_second=(loop.step - loop.start_step) / max(elapsed, 1e-9),
                      traces_after_warmup=self.traces.retraces_after_warmup())
        loop.metrics.write(record)
        loop.first_loss = record["total"] if loop.first_loss is None else loop.first_loss
        loop.last_loss = record["total"]
        loop.bar.set_postfix(mel=f"{record['mel_l1']:.3f}", phase=phase)
        if record["nonfinite_in_a_row"] >= t.max_nonfinite_steps:
            raise VocoderTrainingError(
                f"Stopped at step {loop.step}: {int(record['nonfinite_in_a_row'])} steps in a row had a non-finite "
                f"loss or gradient (skipped; training.max_nonfinite_steps = {t.max_nonfinite_steps}). Last "
                f"checkpoint: {self.checkpoints.latest or 'none'}. Lower training.learning_rate or "
                "vocoder.discriminator_learning_rate.")

    def validate_periodically(self, loop: LoopState) -> None:
        """Every validate_every steps and at the last: resynthesis of the validation clips (their audio every
        summary_every steps and at the last)."""
        t = self.cfg.training
        if loop.crossed(t.validate_every) or loop.final:
            with loop.clock.paused():  # validation is not training time
                loop.validation_loss = self.validate(loop.step, loop.metrics, audio=bool(t.summary_every) and (
                    loop.crossed(t.summary_every) or loop.final))

    def checkpoint(self, loop: LoopState) -> None:
        """Every checkpoint_every steps, at the last and when stopping early."""
        self.step.assign(loop.step)
        save_checkpoint(loop, self.checkpoints, self.trained_seconds)

    def validate(self, step: int, metrics: MetricsLog, audio: bool) -> float | None:
        """Resynthesise the fixed validation clips whole: mel L1 against the recordings; their audio to TensorBoard."""
        if not self.validation:
            return None
        errors = []
        writer = metrics.writer("validation") if audio else None
        for index, clip in enumerate(self.validation):
            generated = self.generate(tf.constant(clip["mel"][None]))[0]  # [(frames - 1) * hop]
            real = tf.constant(clip["audio"])
            errors.append(float(tf.reduce_mean(tf.abs(self.steps.frontend(generated) - self.steps.frontend(real)))))
            if writer is not None:
                with writer.as_default(step=step):
                    tf.summary.audio(f"resynthesis/{index}_{clip['id']}", tf.reshape(generated, [1, -1, 1]),
                                     self.cfg.audio.sample_rate)
        value = float(np.mean(errors))
        metrics.write({"step": step, "mel_l1": value}, split="validation")
        return value
