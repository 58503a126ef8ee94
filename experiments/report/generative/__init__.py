"""The report of a generative sweep (`experiment.workload=generative`: conversations to an OpenAI-compatible server,
measured per token, priced per 1M output tokens), written by its own sections and put in order by `build`: `points`
(the numbers: every point at every listed price, the picks within the TTFT and TPOT targets), `answer`, `cost_section`
(cost across tiers and the two Pareto frontiers, `plots`), `ceiling_section` (each launched server against its engine
in-process, and the verdicts), `tier_section` (one tier's token table and its costs), `capacity_section` (nodes for a
peak of requests/s) and `method_section`. What every report shares (the header, prices,
problems, errors and traffic over time, the MLflow publishing) is the image report's, in experiments/report/."""
