"""Data: corpus reading, prepare (validated sharded feature cache), stats, bucket plans, input pipeline.

Import the submodules directly (``from myxtts.data.pipeline import InputPipeline``); this package
import stays light so the CLI starts fast.
"""
