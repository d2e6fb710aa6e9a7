"""Memory storage and embeddings: the ``MemoryStore`` protocol and its Qdrant implementations.

``store`` holds the contract and shared helpers; ``edge`` the embedded default (Qdrant Edge),
``qdrant`` a Qdrant server or cluster, ``lexical`` the BM25 sparse vectors of hybrid retrieval.
Submodules are imported where used so that importing the package stays cheap.
"""
