"""What a compliance reviewer files beside a run: the audit's metadata, the mapping of benchmarks
and gates to regulatory clauses, and the run's signature. Reads and writes files of a run folder;
never the engine, the backends or the benchmarks (the report reads this package, not the reverse).
"""
