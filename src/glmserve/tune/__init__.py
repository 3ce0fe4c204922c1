"""``glmserve tune``: search a profile's server flags for the best configuration under latency
SLOs, one server per host of a pool at a time (``start`` creates or resumes a tune, ``runner``
runs the loop, ``space`` parses and scores, ``state`` is the stored tune, ``profile_out``
writes ``--write-profile``, ``options`` declares the verb's options).

Empty on purpose: the CLI loads ``tune.options`` to build the verb, not the search."""
