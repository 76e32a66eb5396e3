"""Everything that runs an audit: benchmarks, model backends, engine, gates, reports, pytest plugin."""

__version__ = "0.1.0"
