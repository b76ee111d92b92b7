"""A simulated Kubernetes cluster with GPUs that real Kubernetes clients accept.

Self-contained: it imports nothing from the rest of jupyterhub_gpu_reclaim.
"""
