"""Sweeps: several profiles through check -> launch -> watch -> bench -> stop as one resumable
command (the hand-made tuning loop: flashinfer + patch, then trtllm_mla, then cutlass_mla).

``state`` holds what is saved (``sweep.json``, atomically rewritten after every step, so
``--resume`` continues), ``summary`` the pure table and markdown, ``loop`` the runner and its
``SweepBackend`` seam (tests drive it without servers), ``backend`` the real backend over the
deployment layer.
"""
