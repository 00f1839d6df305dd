"""The benchmark cases, one module each: NN_name.py, numbered as benchmarks/README.md
reports them, each with a TITLE and a `run(ctx)` returning its rows (benchmarks/run.py
finds and runs them)."""
