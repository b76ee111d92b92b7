"""A simulated Kubernetes cluster with GPUs that real Kubernetes clients accept.

Test and demo infrastructure: the product never imports it (it uses a few of the
product's Kubernetes helpers, `kube` and `images`, and `launch`).
"""
