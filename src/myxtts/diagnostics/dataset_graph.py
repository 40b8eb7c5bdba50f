"""Static facts about a tf.data pipeline, read stage by stage without serialising any data.

`_as_serialized_graph()` embeds every captured tensor (a `from_tensor_slices` corpus, a cache's
constants) in the GraphDef: for a real corpus that approaches protobuf's 2 GB limit, and a failure
there would lose the Python-function check. Instead we walk the dataset objects
(`_inputs()`, every input, private and guarded) and list the op types of each stage's traced functions
(`StructuredFunctionWrapper.function.graph.get_operations()`, recursing into the functions those
graphs call through `FuncGraph._functions`). Nothing is copied, so the cost does not depend on the
corpus size. A stage that cannot be read is reported ("could not scan: <why>"), never skipped quietly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

PY_FUNC_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
GENERATOR_OPS = {"GeneratorDataset"}
_TRANSPARENT = ("Options", "Model", "MaxIntraOpParallelism", "PrivateThreadPool")
_MAX_DATASETS = 512  # a pipeline is a handful of stages; this only guards against a cyclic private API


@dataclass
class StageFacts:
    """One dataset object of the pipeline: what its functions contain."""

    name: str  # e.g. "Map", "ParallelMap", "FlatMap"
    depth: int  # 0 for the final dataset, +1 per input hop
    ops: dict[str, int] = field(default_factory=dict)
    py_functions: list[str] = field(default_factory=list)  # "EagerPyFunc in function __inference_..."
    generator: bool = False  # from_generator: a Python generator behind a GeneratorDataset op
    sequential_map: bool = False
    parallel_map: bool = False
    stateful: bool = False  # a stateful op: TF's default map_parallelization rewrite leaves the map sequential


@dataclass
class GraphFacts:
    py_functions: list[str] = field(default_factory=list)  # "EagerPyFunc in stage Map (function ...)"
    generator_sources: int = 0
    sequential_maps: int = 0
    parallel_maps: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    available: bool = True  # False when the pipeline could not be walked at all
    note: str = ""  # every "could not scan: <why>", joined
    stages: list[StageFacts] = field(default_factory=list)


def stage_name(dataset: Any) -> str:
    return type(dataset).__name__.lstrip("_").replace("Dataset", "") or type(dataset).__name__


def _inputs(dataset: Any) -> list[Any]:
    inputs = getattr(dataset, "_inputs", None)
    try:
        return list(inputs()) if callable(inputs) else []
    except Exception:  # a dataset type without inputs support: it is treated as a source
        return []


def stages(dataset: tf.data.Dataset) -> list[tf.data.Dataset]:
    """The chain from the source to `dataset` (`_inputs()`: private, guarded).

    Where a stage has several inputs (``enumerate()`` is ``zip((range, self))``, ``zip``, ``concatenate``)
    the chain follows the input with the longest history of its own: the data path, not the counter."""
    chain = [dataset]
    current = dataset
    for _ in range(_MAX_DATASETS):
        upstream = _inputs(current)
        if not upstream:
            break
        current = max(upstream, key=_history_length) if len(upstream) > 1 else upstream[0]
        chain.append(current)
    return list(reversed(chain))


def _history_length(dataset: Any) -> int:
    """Number of datasets upstream of ``dataset`` (all inputs, bounded)."""
    seen, pending = 0, [dataset]
    while pending and seen < _MAX_DATASETS:
        seen += 1
        pending.extend(_inputs(pending.pop()))
    return seen


def is_transparent(dataset: Any) -> bool:
    """Option / model wrappers tf.data adds: they do no work of their own."""
    return any(stage_name(dataset).startswith(prefix) for prefix in _TRANSPARENT)


def final_stage(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The last real transformation (skipping option / model wrappers tf.data adds)."""
    for stage in reversed(stages(dataset)):
        if not is_transparent(stage):
            return stage
    return dataset


def has_final_prefetch(dataset: tf.data.Dataset) -> bool:
    name = stage_name(final_stage(dataset))
    return "Prefetch" in name or "CopyToDevice" in name


def _function_graphs(dataset: Any) -> list[tuple[str, Any]]:
    """(attribute, FuncGraph) of every traced function a dataset object holds (map_func, predicate, ...)."""
    graphs = []
    for attribute, value in vars(dataset).items():
        function = getattr(value, "function", None)  # StructuredFunctionWrapper -> ConcreteFunction
        graph = getattr(function, "graph", None)
        if graph is not None and callable(getattr(graph, "get_operations", None)):
            graphs.append((attribute, graph))
    return graphs


def _scan_graph(graph: Any, where: str, stage: StageFacts, seen: set[int]) -> None:
    """Op types of `graph` and of every function it calls (tf.cond branches, nested tf.functions)."""
    if id(graph) in seen:
        return
    seen.add(id(graph))
    for operation in graph.get_operations():
        op_type = operation.type
        stage.ops[op_type] = stage.ops.get(op_type, 0) + 1
        if op_type in PY_FUNC_OPS:
            stage.py_functions.append(f"{op_type} in {where}")
        elif op_type in GENERATOR_OPS:
            stage.generator = True
        if getattr(operation, "_is_stateful", False) and op_type not in ("Placeholder", "NoOp"):
            stage.stateful = True
    for name, function in dict(getattr(graph, "_functions", {}) or {}).items():  # private, guarded
        inner = getattr(function, "graph", None)
        if inner is not None and callable(getattr(inner, "get_operations", None)):
            _scan_graph(inner, f"function {name}", stage, seen)
            continue
        definition = getattr(function, "definition", None)  # FunctionDef proto: node types only
        for node in getattr(definition, "node_def", []):
            stage.ops[node.op] = stage.ops.get(node.op, 0) + 1
            if node.op in PY_FUNC_OPS:
                stage.py_functions.append(f"{node.op} in function {name}")
            elif node.op in GENERATOR_OPS:
                stage.generator = True


def scan_stage(dataset: Any, depth: int) -> StageFacts:
    name = stage_name(dataset)
    stage = StageFacts(name=name, depth=depth, generator=name.startswith("Generator"),
                       sequential_map=name == "Map", parallel_map=name.startswith("ParallelMap"))
    seen: set[int] = set()
    for attribute, graph in _function_graphs(dataset):
        _scan_graph(graph, f"stage {name} ({attribute.lstrip('_')})", stage, seen)
    if stage.generator:  # the generator's own PyFuncs (iterator id, next, finalize) are the generator finding
        stage.py_functions = [item for item in stage.py_functions if "from_generator" not in item]
    return stage


def graph_facts(dataset: tf.data.Dataset) -> GraphFacts:
    """Walk every dataset object upstream of `dataset` and scan its functions; no data is serialised."""
    facts = GraphFacts()
    if not callable(getattr(dataset, "_inputs", None)):
        return GraphFacts(available=False, note=f"could not scan: Dataset._inputs is missing on TF {tf.__version__}")
    notes: list[str] = []
    pending: list[tuple[Any, int]] = [(dataset, 0)]
    visited: set[int] = set()
    while pending and len(visited) < _MAX_DATASETS:
        current, depth = pending.pop()
        if id(current) in visited:
            continue
        visited.add(id(current))
        try:
            stage = scan_stage(current, depth)
        except Exception as err:  # a private attribute changed shape: say so instead of dropping the check
            notes.append(f"could not scan: stage {stage_name(current)}: {type(err).__name__}: {err}")
            stage = StageFacts(name=stage_name(current), depth=depth)
        facts.stages.append(stage)
        pending.extend((upstream, depth + 1) for upstream in _inputs(current))
    if pending:
        notes.append(f"could not scan: more than {_MAX_DATASETS} dataset objects; the rest were not read")
    facts.stages.sort(key=lambda stage: -stage.depth)  # source first, like stages()
    for stage in facts.stages:
        facts.py_functions.extend(stage.py_functions)
        facts.generator_sources += int(stage.generator)
        facts.sequential_maps += int(stage.sequential_map)
        facts.parallel_maps += int(stage.parallel_map)
        for op_type, count in stage.ops.items():
            facts.ops[op_type] = facts.ops.get(op_type, 0) + count
    facts.note = "; ".join(notes)
    return facts
