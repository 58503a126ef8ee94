"""The compiled load engine: `loadgen.c`, built on each client node on first use (`build`), run by a client actor
as a subprocess whose per-request records it reads (`compiled_load.CompiledLoad`)."""
