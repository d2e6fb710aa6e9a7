"""The memory pipeline: per-request options, query text, retrieval, injection, explain, capture.

``Pipeline`` (``pipeline.py``) implements ``MemoryPipeline`` (``contract.py``, the plug-in point
of the routes with memory, one ``ApiAdapter`` per API: ``proxy/apis/``); ``build_pipeline``
(``proxy/composition.py``) wires it inside the lifespan.
"""
