"""The parts of benchmarks/sim_scale.py (the script keeps its options and `main`): what it
sets up and aims for (scene), the hub's ServiceAccount (hub_account), KubeSpawner's
reflector in its own process (reflector), the pods (pods), how requests are timed
(timing), the transfer floor (floor), the run's phases (run), its tables and reading
(report), and its section of docs/benchmarks.md (docs_section).

None of them imports kubernetes_asyncio or kubespawner at the top of a module: the first
reads KUBECONFIG when it is imported, and the script sets KUBECONFIG only once the
simulator is up."""
