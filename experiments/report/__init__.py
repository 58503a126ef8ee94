"""The cost-per-image report of a sweep: `data` (MLflow runs -> pandas), `tables` (numbers), `plots` (PNG),
`render` (Markdown/HTML), `build` (the report's sections), `publish` (files + MLflow). Entry point:
`python -m runners.report`."""
