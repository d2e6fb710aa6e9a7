"""The context engine: pure functions and frozen dataclasses, no network, clock, files or globals.

The engine, one concept a module: ``tokens`` (the tokenizer port it is handed), ``records``
(memory records), ``billing`` (a request's tokens as billed), ``limits`` (model limits),
``allocation`` (the memory budget), ``ranking`` (composite and source scores), ``words``
(normalising and matching), ``shortlist`` (the bundle stage), ``dedup``, ``knapsack``
(packing), ``render`` (the block and its exact count), ``assembler`` (score, bundle, dedup,
pack, render) and ``inject``. I/O lives in adapters outside: ``proxy/tokenizer.py`` (tiktoken),
``proxy/model_limits.py`` (litellm's model table), ``proxy/bundled_data.py`` (their files).

The seed compatibility layer, importable where the seed documents put it: ``budget``
(``TokenBudgetCalculator``), ``scorer`` (``MemoryScorer``), ``packer``
(``GreedyKnapsackPacker``), ``synthesizer`` (``MemorySynthesizer``) and ``bundle``
(``BundleAccumulator``). Each converts the seed's loose inputs once, defaults to the process's
tokenizer where the seed takes none, and calls the engine; the engine never imports it.
"""
