"""``glmserve bench``: workload -> async streaming client -> records -> metrics -> BenchResult.

One module per stage: ``workload`` (prompts and request bodies, pure), ``client`` (httpx SSE
streaming into ``metrics.StreamRecord``), ``runner`` (closed-loop concurrency levels, worker
processes, faults), ``results`` (the versioned ``BenchResult`` and its renderers, gates).
"""
