"""Profiles and launch specs: YAML in, a validated LaunchSpec and its rendered script out (pure)."""
