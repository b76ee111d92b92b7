"""A simulated Kubernetes cluster with GPUs that real Kubernetes clients accept, and the
demo that runs the product on it (`jupyterhub-gpu-reclaim-sim run` / `demo`).

Test and demo infrastructure, like kwok beside Kubernetes: it imports a few of the
product's helpers (`jupyterhub_gpu_reclaim.spawner.kube`, `.images`, `.timestamps`), and the
product never imports it (tests/architecture/test_imports.py). Its dependencies are the `sim` extra.
"""
