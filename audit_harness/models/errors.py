"""What a backend's forward primitives raise for the engine to act on (``engine.executor``):
retry on smaller batches, or stop sharing prefixes for this model."""


class BackendOutOfMemory(RuntimeError):
    """A forward ran out of device memory; the engine halves the batch and retries."""


class PrefixUnsupported(RuntimeError):
    """The model's key/value state cannot be reused (recurrent layers, legacy caches)."""
