"""Run: a tier's sweep, its server groups and their trials (SLO search and cross-check included)."""
