"""The cost-per-image report of a sweep: `data` (MLflow runs -> pandas), `tables` (numbers), `marks` (caveats on
figures: unstable, overloaded), `plots` (PNG), `render` (Markdown/HTML), `answer` (the pick), `served` (offered
vs served: overloaded trials, open-loop rates, server counts), `capacity` and `capacity_section` (nodes and
$/month per tier for a traffic), `trace_section`, `deploy`, `studies`, `prices_section` (prices and what
the benchmark cost), `cross_tier_section` (cost across tiers, Pareto frontier, ratios), `tier_section` (one tier's
tables), `slo_search_section`, `method_section` (how the numbers were made), `build` (the sections in order), `publish`
(files + MLflow, and which workload's report a sweep gets). A generative sweep's report (per 1M tokens) is built by its
own sections in `generative/`, reusing the shared ones. Entry point: `python -m runners.report`."""
