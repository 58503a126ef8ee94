"""Measure: client actors generate load, windows repeat until stable, figures come from the raw samples."""
