"""Results: trial records in the run folder first, then MLflow (live, or later by relog)."""
