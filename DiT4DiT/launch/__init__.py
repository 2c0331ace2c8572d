"""The training launcher's logic: host kind, NPU topology, options, config values, network, environment,
preflight and the plan that ties them together. scripts/train_8p.sh runs `python -m DiT4DiT.launch` and
does what the plan says; `python -m DiT4DiT.launch --dry-run ...` prints it."""
