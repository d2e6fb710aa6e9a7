"""The memory pipeline: per-request options, query text, retrieval, injection, explain, capture.

``Pipeline`` (``pipeline.py``) implements ``MemoryPipeline`` (``contract.py``, the chat route's
plug-in point); ``build_pipeline`` (``proxy/composition.py``) wires it inside the lifespan.
"""
