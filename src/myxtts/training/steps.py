"""Compiled train / validate steps: one tf.function per (kind, batch shape), static input_signature, warmed up before
training and looked up by each batch's shape (``shape_keys.py``); a shape outside the signatures is refused, not
compiled. What each step computes in its graph (gradients, all-reduce, accumulation, the guarded update, the loss
scale) and the state it changes: ``training.step_graphs``.
"""

from __future__ import annotations

from typing import Any, Callable, Collection

import keras
import tensorflow as tf

from myxtts.config import Config
from myxtts.model import TTSModel, add_normalizers
from myxtts.model.losses import NORMALIZER_KEYS
from myxtts.training import warmup
from myxtts.training.shape_keys import (ShapeKey, UnknownShapeError, describe_key, shape_key, unstack_spec,
                                       warmup_name)
from myxtts.training.step_graphs import StepGraphs

# the global batch's real counts, an input of the train step when gradient accumulation spreads it over calls
NORMALIZER_SIGNATURE = {key: tf.TensorSpec([], tf.float32, name=key) for key in NORMALIZER_KEYS}


class TrainingSteps(StepGraphs):
    """Builds, warms up and dispatches the per-shape compiled steps (their graph bodies and state: ``StepGraphs``)."""

    def __init__(self, model: TTSModel, optimizer: keras.optimizers.Optimizer, cfg: Config,
                 strategy: tf.distribute.Strategy,
                 discriminator_optimizer: keras.optimizers.Optimizer | None = None):
        """``discriminator_optimizer``: the mel discriminator's (with ``model.mel_adversarial_weight`` or
        ``model.mel_feature_matching_weight`` > 0); None: one like the model's (``training.*``)."""
        super().__init__(model, optimizer, cfg, strategy, discriminator_optimizer)
        self.train_functions: dict[ShapeKey, Callable] = {}
        self.validate_functions: dict[ShapeKey, Callable] = {}
        self.warmup_seconds: dict[str, float] = {}  # "<kind>_step[<shape>]" -> trace + warm-up runs, seconds
        self.warmup_runs_seconds: dict[str, list[float]] = {}  # same keys -> [trace + first run, any later runs]
        self.warmup_names: dict[str, str] = {}  # trace-accounting name of a compiled step -> its warm-up key
        self.signatures: dict[ShapeKey, dict] = {}  # batch signatures (what validate and the model take)
        self.train_signatures: dict[ShapeKey, dict] = {}  # the train calls' (blocks with steps_per_execution)

    # ---- compile / warm up / dispatch -------------------------------------------------------------
    def build(self, signatures: list[dict], wrap: Callable[[Any, str], Callable],
              validate_buckets: Collection[int] | None = None) -> None:
        """One tf.function per (kind, signature); ``wrap(fn, name)`` lets the monitor watch each.
        ``validate_buckets``: the indices of the signatures a validate step is built for (the buckets the
        validation split fills: no other shape ever reaches ``validate``); None: every signature."""
        t = self.cfg.training
        blocks = self.steps_per_execution > 1  # train signatures are blocks [K, batch, ...]
        train_body = self.train_block if blocks else self.train_graph
        batch_keys = [shape_key(unstack_spec(spec) if blocks else spec) for spec in signatures]
        validated_keys = set(batch_keys) if validate_buckets is None else {batch_keys[i] for i in validate_buckets}
        for index, spec in enumerate(signatures):
            batch_spec = unstack_spec(spec) if blocks else spec
            key = batch_keys[index]
            if key in self.train_functions:
                continue
            self.signatures[key] = batch_spec
            self.train_signatures[key] = spec
            label = f"bucket {index}: {describe_key(key)}"
            validated = key in validated_keys
            if not t.enable_graph_mode:  # eager, for debugging only: nothing is compiled or traced
                self.train_functions[key] = train_body
                if validated:
                    self.validate_functions[key] = self.validate_graph
                continue
            # autograph=False: the steps' control flow is written as tf.while_loop / tf.cond, so AutoGraph's source
            # conversion of every layer's Python only lengthens warm-up (docs/benchmarks.md, "Warm-up")
            options = dict(jit_compile=t.enable_xla_compilation and self.replicas == 1, reduce_retracing=False,
                           autograph=False)
            # with accumulation the global batch's counts come in as a second (scalar) argument
            train_signature = [spec] if self.accumulation == 1 else [spec, NORMALIZER_SIGNATURE]
            train_prefix = f"train_{self.steps_per_execution}_steps" if blocks else "train_step"
            train_name, validate_name = f"{train_prefix}[{label}]", f"validate_step[{label}]"
            self.warmup_names[train_name] = warmup_name("train", key)
            self.train_functions[key] = wrap(tf.function(train_body, input_signature=train_signature, **options),
                                             train_name)
            if validated:
                self.warmup_names[validate_name] = warmup_name("validate", key)
                self.validate_functions[key] = wrap(tf.function(self.validate_graph, input_signature=[batch_spec],
                                                                **options), validate_name)

    # ---- warm-up and state snapshot (training/warmup.py) ---------------------------------------------
    def warm_up(self, execute: bool = True, runs: int = 1) -> dict[str, float]:
        """Trace every compiled function and (``execute``) run it ``runs`` times, overlapped, then restore every
        state variable bit for bit; seconds per function (``warmup.warm_up``)."""
        return warmup.warm_up(self, execute, runs)

    def warm_up_jobs(self) -> list[tuple[str, str, Callable, list]]:
        """(name, kind, function, arguments) of every compiled function, on a dummy batch of its signature."""
        jobs = []
        for kind, functions in (("train", self.train_functions), ("validate", self.validate_functions)):
            for key, function in functions.items():
                batch = warmup.warmup_batch((self.train_signatures if kind == "train" else self.signatures)[key])
                arguments = [batch] if kind == "validate" or self.accumulation == 1 else \
                    [batch, self.batch_normalizers(batch)]
                jobs.append((warmup_name(kind, key), kind, function, arguments))
        return jobs

    def snapshot_state(self) -> list:
        """Host copies of every replica's value of every state variable (exact, any strategy)."""
        return warmup.snapshot(self.state_variables(), self.strategy)

    def restore_state(self, snapshot: list) -> None:
        warmup.restore(self.state_variables(), self.strategy, snapshot)

    def _lookup(self, functions: dict, batch: dict, stacked: bool = False) -> Callable:
        if stacked and (batch["tokens"].shape.rank != 3 or batch["tokens"].shape[0] != self.steps_per_execution):
            k = self.steps_per_execution
            raise UnknownShapeError(f"With training.steps_per_execution = {k} a train call takes a block of {k} "
                                    f"batches (tokens [{k}, batch, text]), got tokens of shape "
                                    f"{batch['tokens'].shape.as_list()}: build the InputPipeline from the same "
                                    "config (it stacks the train batches itself).")
        key = shape_key(batch, stacked)
        function = functions.get(key)
        if function is None:
            raise UnknownShapeError(f"Batch shape {describe_key(key)} is not one of the pipeline's signatures "
                                    f"({', '.join(describe_key(k) for k in functions)}); compiling it now would "
                                    "retrace. The input pipeline must only emit its signatures() shapes.")
        return function

    def train(self, batch: dict, normalizers: dict | None = None) -> dict:
        """One micro-batch. With gradient accumulation ``normalizers`` (the cycle's real counts) is required:
        use ``train_cycle``, which computes them."""
        function = self._lookup(self.train_functions, batch, stacked=self.steps_per_execution > 1)
        if self.accumulation == 1:
            return function(batch)
        if normalizers is None:
            raise ValueError("With training.gradient_accumulation_steps > 1 every micro-batch needs the real counts "
                             "of its whole cycle; call TrainingSteps.train_cycle(batches).")
        return function(batch, normalizers)

    def train_cycle(self, batches: list[dict]) -> dict:
        """One optimizer update from ``gradient_accumulation_steps`` micro-batches (any bucket shapes): each
        divides its sums by the cycle's total real counts, so the update equals one big batch's. Returns
        the last call's outputs (the cycle's losses)."""
        if len(batches) != self.accumulation:
            raise ValueError(f"train_cycle needs {self.accumulation} micro-batches "
                             f"(training.gradient_accumulation_steps), got {len(batches)}.")
        if self.accumulation == 1:
            return self.train(batches[0])
        # eager scalar ops on the batches' own device: no host synchronisation
        normalizers = add_normalizers([self.batch_normalizers(batch) for batch in batches])
        functions = [self._lookup(self.train_functions, batch) for batch in batches]  # all shapes known first
        outputs = [function(batch, normalizers) for function, batch in zip(functions, batches)]
        return outputs[-1]

    def validate(self, batch: dict) -> dict:
        return self._lookup(self.validate_functions, batch)(batch)
