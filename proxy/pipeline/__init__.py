"""The memory pipeline: per-request options, query text, retrieval, injection, explain, capture.

``Pipeline`` (``pipeline.py``) implements ``proxy.hooks.MemoryPipeline``; ``build_pipeline``
(in ``proxy.backends``) wires it from the app's backends inside the lifespan.
"""
