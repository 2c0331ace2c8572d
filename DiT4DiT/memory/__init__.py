"""How much memory a training run needs and what to change when it does not fit: the per-device estimate
(estimate.py) from the activation rows measured on the CPU (measured.py), the host's share (host.py), and the plan
the launcher's preflight and the doctor print (plan.py). Standard library only, so the doctor runs without torch."""
