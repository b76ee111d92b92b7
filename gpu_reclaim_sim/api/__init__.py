"""The Kubernetes API's own semantics, written from Kubernetes' documentation: quantities,
timestamps, taints and tolerations, node affinity, a pod's resource requests, image names."""
