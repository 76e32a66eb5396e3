"""Request execution for every backend (``executor.Engine``): the prefix tree of the requests,
token-budget batching, dedupe, the SQLite result cache and progress; benchmarks shape requests
(``multiple_choice``, ``token_scores``), backends only run forwards."""
