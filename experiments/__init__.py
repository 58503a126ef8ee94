"""The engine, one package per stage of a sweep: config -> plan -> cluster -> run (server groups, trials) ->
measure -> results -> report. See docs/architecture.md."""
