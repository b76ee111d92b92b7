"""A simulated Kubernetes cluster with GPUs that real Kubernetes clients accept, and the
demo that runs the product on it (`jupyterhub-gpu-reclaim-sim run` / `demo`).

Test and demo infrastructure, like kwok beside Kubernetes. Its folders are the components
of a real cluster (docs/sim.md, "Layout"), and its Kubernetes semantics (quantities, taints,
node affinity, requests, image names, times: `api/`) are its own, written from Kubernetes'
documentation: the product it runs is tested against them, never against itself. It
imports the product only where the demo configures and starts it (demo_config/); the
product never imports it (tests/architecture). Its dependencies are the `sim` extra.
"""
