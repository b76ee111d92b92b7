"""The pure parts of the simulated kube-scheduler (v1.30 default profile), unit-tested
apart from the loop that runs them (`gpu_reclaim_sim.scheduler.scheduler`): `facts` (what it knows of
pods and nodes), `filters`, `scores` and `preemption`."""
