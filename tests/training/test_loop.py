"""The loop skeleton both trainers run (myxtts.training.loop): periodic actions on crossed multiples, also for calls of
several steps and runs resumed mid-interval; a signal stops at a checkpoint; a spent budget trains nothing."""

from __future__ import annotations

from myxtts.training.interrupt import StopOnSignals
from myxtts.training.loop import LoopActions, LoopState, run_loop
from myxtts.training.reporting import MetricsLog
from myxtts.training.stages import StopReason, TrainingClock, progress_bar


def _state(tmp_path, start_step: int, max_steps: int, per_call: int, trained_before: float = 0.0,
           max_minutes: float = 0.0) -> LoopState:
    return LoopState(start_step=start_step, max_steps=max_steps, per_call=per_call,
                     clock=TrainingClock(trained_before, max_minutes), metrics=MetricsLog(tmp_path, enabled=False),
                     bar=progress_bar(max_steps, start_step, enabled=False))


def _recording_actions(calls: dict[str, list[int]], every: int, **overrides) -> LoopActions:
    def train_call(loop: LoopState) -> dict:
        loop.step += loop.per_call
        return {}

    def periodic(loop: LoopState) -> None:
        if loop.crossed(every):
            calls["periodic"].append(loop.step)

    actions = {"train_call": train_call, "log": lambda out, loop: calls["log"].append(loop.step),
               "checkpoint": lambda loop: calls["checkpoint"].append(loop.step), "periodic": periodic,
               "next_call": lambda loop: calls["next_call"].append(loop.step)}
    return LoopActions(**{**actions, **overrides})


def test_periodic_actions_run_where_calls_of_several_steps_cross_a_multiple_after_a_mid_interval_resume(tmp_path):
    calls: dict[str, list[int]] = {"log": [], "checkpoint": [], "periodic": [], "next_call": []}
    loop = _state(tmp_path, start_step=5, max_steps=23, per_call=3)  # steps 8, 11, 14, 17, 20, 23
    run_loop(loop, _recording_actions(calls, every=4), StopOnSignals(enabled=False), log_every=6,
             checkpoint_every=10, echo=print)
    assert loop.step == 23 and loop.stopped is None
    assert calls["periodic"] == [8, 14, 17, 20]  # passed 8, 12, 16, 20 (never twice, never skipped)
    assert calls["log"] == [8, 14, 20, 23]  # the first call, multiples of 6 passed (12, 18), the last
    assert calls["checkpoint"] == [11, 20, 23]  # multiples of 10 passed, and the end
    assert calls["next_call"] == [8, 11, 14, 17, 20]  # not after the last
    assert not loop.crossed(0)  # 0: never


def test_a_signal_during_the_periodic_actions_stops_at_a_checkpoint(tmp_path):
    calls: dict[str, list[int]] = {"log": [], "checkpoint": [], "periodic": [], "next_call": []}
    interrupt = StopOnSignals(enabled=False)
    lines: list[str] = []

    def periodic(loop: LoopState) -> None:
        if loop.step == 3:
            interrupt.requested = "SIGTERM"  # as the handler would, while validating

    loop = _state(tmp_path, start_step=0, max_steps=10, per_call=1)
    run_loop(loop, _recording_actions(calls, every=1, periodic=periodic), interrupt, log_every=5,
             checkpoint_every=100, echo=lines.append)
    assert loop.step == 3 and loop.stopped is StopReason.INTERRUPTED
    assert calls["checkpoint"] == [3] and calls["next_call"] == [1, 2]
    assert lines == ["SIGTERM at step 3: the step finished and a checkpoint was saved; a resume continues from it "
                     "exactly"]


def test_a_budget_spent_by_the_runs_resumed_trains_nothing(tmp_path):
    calls: dict[str, list[int]] = {"log": [], "checkpoint": [], "periodic": [], "next_call": []}
    lines: list[str] = []
    loop = _state(tmp_path, start_step=4, max_steps=10, per_call=1, trained_before=120.0, max_minutes=2)
    run_loop(loop, _recording_actions(calls, every=1), StopOnSignals(enabled=False), log_every=1,
             checkpoint_every=1, echo=lines.append)
    assert loop.step == 4 and loop.stopped is StopReason.MAX_MINUTES
    assert calls == {"log": [], "checkpoint": [], "periodic": [], "next_call": []}
    assert lines == ["training.max_minutes (2) already spent at step 4; raise it to go on"]
