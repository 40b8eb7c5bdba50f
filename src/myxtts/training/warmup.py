"""Warm-up of the compiled steps: trace and first-call every function before training, leaving no trace.

Tracing alone leaves TF's graph optimisation (grappler, kernel creation) to the first real call of each
shape, a few seconds each, which would make the first steps of every bucket slow. So each function is traced
(``get_concrete_function`` on a dummy batch of its own signature, through its monitor wrapper, which
therefore sees and counts the trace) and then *called* on that batch, the calls running in a thread while
the next function traces. Every variable a step can change (model, optimizer incl. iterations and loss
scale, counters, accumulators) is restored bit for bit afterwards, also after every run when ``runs`` > 1.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import tensorflow as tf

# ``steps`` below is a ``training.steps.TrainingSteps``, which imports this module: it is not imported back

def warmup_batch(spec: dict) -> dict[str, tf.Tensor]:
    """A valid batch (or block) of exactly this signature (zeros, every length full) for the warm-up run."""
    # length key -> (padded key, axis of its time dimension counted from the end)
    lengths_of = {"token_lengths": ("tokens", -1), "mel_lengths": ("mel", -2),
                  "reference_lengths": ("reference_mel", -2)}
    batch = {}
    for key, tensor_spec in spec.items():
        shape = tensor_spec.shape.as_list()
        if key in lengths_of:  # [batch] = the padded length: every position real, nothing degenerate
            padded, axis = lengths_of[key]
            batch[key] = tf.fill(shape, tf.constant(spec[padded].shape[axis], tensor_spec.dtype))
        else:
            batch[key] = tf.zeros(shape, tensor_spec.dtype)
    return batch


# ---- state snapshot (warm-up runs real steps, then puts everything back) ----------------------------
def _components(variable: Any, strategy: tf.distribute.Strategy) -> list:
    """The per-device tf.Variables behind a (Keras or distributed) variable: what snapshot/restore copy."""
    inner = getattr(variable, "_value", None)  # keras.Variable -> its backend tf.Variable (private, guarded)
    inner = inner if isinstance(inner, tf.Variable) else variable
    return list(strategy.experimental_local_results(inner))


def snapshot(variables: list, strategy: tf.distribute.Strategy) -> list:
    """Host copies of every replica's value of every variable (exact, any strategy)."""
    return [[np.array(component.numpy(), copy=True) for component in _components(variable, strategy)]
            for variable in variables]


def restore(variables: list, strategy: tf.distribute.Strategy, values: list) -> None:
    """Put back a ``snapshot`` of the same variables."""
    for variable, copies in zip(variables, values, strict=True):
        for component, value in zip(_components(variable, strategy), copies, strict=True):
            component.assign(value)


# ---- warm-up ---------------------------------------------------------------------------------------
def warm_up(steps: Any, execute: bool = True, runs: int = 1) -> dict[str, float]:
    """Trace every compiled function of ``steps`` and (``execute``) run it ``runs`` times; seconds per function.

    Under ``tf.config.run_functions_eagerly`` a call would not trace, only run eagerly, so there it only
    traces (``get_concrete_function``), as with ``execute=False``. ``steps.warmup_runs_seconds`` keeps each
    function's [trace + first run, later runs...] seconds (a second run takes the steady-state step time: one
    run is enough); ``steps.warmup_seconds`` their sums, also returned.
    """
    if not steps.cfg.training.enable_graph_mode:
        return {}
    execute = execute and runs > 0 and not tf.config.functions_run_eagerly()
    saved = steps.snapshot_state() if execute else None
    jobs = steps.warm_up_jobs()
    try:
        if not execute:
            for name, _, function, _ in jobs:
                started = time.perf_counter()
                function.get_concrete_function()
                steps.warmup_runs_seconds[name] = [time.perf_counter() - started]
        else:
            _overlapped(steps, jobs, runs, saved)
        for name, timings in steps.warmup_runs_seconds.items():
            steps.warmup_seconds[name] = sum(timings)
    finally:
        if saved is not None:
            steps.restore_state(saved)
    return dict(steps.warmup_seconds)


def _overlapped(steps: Any, jobs: list, runs: int, saved: list) -> None:
    """Trace each function here while a runner thread makes the previous one's first calls.

    A function's warm-up is Python tracing (holds the GIL) then its first call (TensorFlow's graph
    optimisation and kernel creation in C++, which releases the GIL), of similar cost. Overlapped, tracing
    function i+1 runs while function i is optimised, which shortens the warm-up (docs/training.md, "Warm-up").
    The calls stay in one thread, in the same order as the traces, so collectives of a multi-worker run line
    up, and each train call is followed by the state restore."""
    def first_calls(kind: str, function: Callable, arguments: list) -> list[float]:
        timings = []
        for _ in range(runs):
            started = time.perf_counter()
            outputs = function(*arguments)  # traced already: graph optimisation + a run
            tf.nest.map_structure(lambda tensor: tensor.numpy(), outputs)  # wait for it
            timings.append(time.perf_counter() - started)
            if kind == "train":
                steps.restore_state(saved)
        return timings

    pending = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="myxtts-warm-up") as runner:
        for name, kind, function, arguments in jobs:
            started = time.perf_counter()
            function.get_concrete_function(*arguments)  # the trace (through the monitor's wrapper)
            pending.append((name, time.perf_counter() - started, runner.submit(first_calls, kind, function,
                                                                               arguments)))
        for name, trace_seconds, future in pending:
            calls = future.result()  # re-raises a failed call here
            steps.warmup_runs_seconds[name] = [trace_seconds + calls[0], *calls[1:]]
