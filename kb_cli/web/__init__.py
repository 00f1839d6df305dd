"""`kb serve`: HTTP over the same services and the same guard as the commands.

A thin adapter, as `kb_cli.cli` is: each route checks the rule its command declares
(kb_cli.permissions) through `services.access.open_as`, calls one service and answers
the contract's records (their `to_dict()`, as `--json` prints them). `errors` maps kb's
error classes to HTTP statuses and one JSON body; `routes` builds the FastAPI app;
`server` runs it under uvicorn. It never runs tasks: `kb work` does.

Imported only by `kb serve` (FastAPI and uvicorn take ~0.5 s to import): no other
command loads it.
"""
