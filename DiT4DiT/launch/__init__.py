"""The training launcher: host kind, NPU topology, options, config values, network, environment, preflight, the
plan that ties them together, and the supervisor that runs it. scripts/train_8p.sh execs `python -m DiT4DiT.launch`;
`python -m DiT4DiT.launch --dry-run ...` prints the plan."""
