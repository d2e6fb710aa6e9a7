"""The context engine: pure functions and frozen dataclasses, no network, clock or globals.

Modules: ``tokens`` (offline tiktoken), ``records`` (memory records), ``budget``, ``scorer``,
``bundle``, ``synthesizer``, ``packer``, ``assembler`` and ``inject``.
"""
