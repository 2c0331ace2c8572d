"""The doctor: is this machine ready to train? (`python -m DiT4DiT.doctor`), with the prompt-store estimate, a
step's FLOPs and the time plan it compares against the machine (the memory estimate is DiT4DiT/memory/)."""
