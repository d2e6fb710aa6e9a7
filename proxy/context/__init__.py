"""The context engine: pure functions and frozen dataclasses, no network, clock or globals.

Modules: ``tokens`` (offline tiktoken), ``records`` (memory records), ``budget`` (with
``billing`` for request counts and ``limits`` for model limits), ``scorer``, ``bundle``,
``synthesizer`` (with ``words`` and ``dedup``), ``packer`` (with ``knapsack``), ``assembler``
(with ``render``) and ``inject``.
"""
