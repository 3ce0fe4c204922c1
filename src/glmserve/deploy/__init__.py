"""Deployments: plan a profile onto a host or host group, launch, watch to a verdict, stop."""
