"""The base-model snapshot (a Cosmos-Predict2.5 pipeline folder), read without loading weights: is the folder
complete (pipeline_folder.py), the sizes its configs declare (pipeline_shape.py), a safetensors file's header
(safetensors_header.py), and the real 2B snapshot's configs and sizes (cosmos_2b.py). Standard library only."""
