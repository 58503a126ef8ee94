"""The cost-per-image report of a sweep: `data` (MLflow runs -> pandas), `tables` (numbers), `marks` (caveats on
figures: unstable, overloaded), `plots` (PNG), `render` (Markdown/HTML), `answer` (the pick), `served` (offered
vs served: overloaded trials, open-loop rates, server counts), `capacity` and `capacity_section` (nodes and
$/month per tier for a traffic), `build` (the report's sections), `publish`
(files + MLflow). Entry point: `python -m runners.report`."""
