"""The pieces of the GPU check (``perf/gpu_check.py``, run through ``perf/gpu_check.sh``), one
concern each: ``common`` (settings, helpers), ``bundle`` (made here), ``install`` (the GPU
machine's environment), ``context`` (what the parts share), and one module per part: ``exact``,
``bf16`` (with ``models``), ``throughput``, ``xdist``."""
