"""Workload generators beyond random prompts (issue 24): shared prefixes, multi-turn."""
