"""This machine as a run meets it: the NPUs it has (npu_topology.py), the processes we start on it and how they
end with their owner (process_lifetime.py), and the paths a tool or an evaluation may create or replace
(output_paths.py). Standard library only, apart from the dataset layout output_paths protects."""
