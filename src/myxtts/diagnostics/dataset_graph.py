"""Static facts about a tf.data pipeline: its stages (`_inputs()` walk) and its serialized graph ops."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

PY_FUNC_OPS = {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
GENERATOR_OPS = {"GeneratorDataset"}
_TRANSPARENT = ("Options", "Model", "MaxIntraOpParallelism", "PrivateThreadPool")


@dataclass
class GraphFacts:
    py_functions: list[str] = field(default_factory=list)  # "PyFunc in <function name>"
    generator_sources: int = 0
    sequential_maps: int = 0
    parallel_maps: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    available: bool = True
    note: str = ""


def stage_name(dataset: Any) -> str:
    return type(dataset).__name__.lstrip("_").replace("Dataset", "") or type(dataset).__name__


def stages(dataset: tf.data.Dataset) -> list[tf.data.Dataset]:
    """The chain from the source to `dataset` following the first input (`_inputs()`: private, guarded)."""
    chain = [dataset]
    current = dataset
    for _ in range(256):
        inputs = getattr(current, "_inputs", None)
        try:
            upstream = inputs() if callable(inputs) else []
        except Exception:  # a dataset type without inputs support
            upstream = []
        if not upstream:
            break
        current = upstream[0]
        chain.append(current)
    return list(reversed(chain))


def final_stage(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The last real transformation (skipping option / model wrappers tf.data adds)."""
    chain = stages(dataset)
    for stage in reversed(chain):
        if not any(stage_name(stage).startswith(prefix) for prefix in _TRANSPARENT):
            return stage
    return dataset


def has_final_prefetch(dataset: tf.data.Dataset) -> bool:
    name = stage_name(final_stage(dataset))
    return "Prefetch" in name or "CopyToDevice" in name


def graph_facts(dataset: tf.data.Dataset) -> GraphFacts:
    """Scan the serialized dataset graph: nodes and library functions (private API, guarded)."""
    facts = GraphFacts()
    serialize = getattr(dataset, "_as_serialized_graph", None)
    if serialize is None:
        return GraphFacts(available=False, note=f"Dataset._as_serialized_graph is missing on TF {tf.__version__}")
    try:
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(serialize().numpy())
    except Exception as err:  # e.g. a dataset holding a resource that cannot be serialized
        return GraphFacts(available=False, note=f"could not serialize the dataset graph: {err}")
    ops: dict[str, int] = {}

    def visit(node: Any, where: str) -> None:
        ops[node.op] = ops.get(node.op, 0) + 1
        if node.op in PY_FUNC_OPS:
            facts.py_functions.append(f"{node.op} in {where}")
        elif node.op in GENERATOR_OPS:
            facts.generator_sources += 1
        elif node.op == "MapDataset":
            facts.sequential_maps += 1
        elif node.op.startswith("ParallelMapDataset"):
            facts.parallel_maps += 1

    for node in graph_def.node:
        visit(node, "the dataset graph")
    for function in graph_def.library.function:
        for node in function.node_def:
            visit(node, f"function {function.signature.name}")
    facts.ops = ops
    return facts
