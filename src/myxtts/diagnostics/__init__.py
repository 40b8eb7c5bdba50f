"""Diagnostics: the retrace explainer (any TF program), `diagnose pipeline`, the report of `diagnose retracing`
(the check itself runs the trainer: ``myxtts.training.retracing_check``), and lint. Nothing here imports another
package of myxtts but ``myxtts.errors``: training and synthesis both use the explainer.

Public API::

    from myxtts.diagnostics import RetraceMonitor, RetraceError, explain_retracing
    monitor = RetraceMonitor(strict=False, json_path=None)
    step = monitor.watch(tf_function, name="train_step[bucket 3]")
    monitor.end_warmup()
    with explain_retracing(strict=False, json_path=None) as monitor: ...
    from myxtts.diagnostics.fixes import propose_all
    propose_all(monitor)            # one fix per function that retraced, from every traced call
"""

from myxtts.diagnostics import trace_cost
from myxtts.diagnostics.events import CAUSES, FIRST_TRACE, JSON_FIELDS, RetraceError, RetraceEvent
from myxtts.diagnostics.retrace_monitor import RetraceMonitor, WatchedFunction
from myxtts.diagnostics.patching import explain_retracing

__all__ = ["CAUSES", "FIRST_TRACE", "JSON_FIELDS", "RetraceError", "RetraceEvent", "RetraceMonitor",
           "WatchedFunction", "explain_retracing", "trace_cost"]
