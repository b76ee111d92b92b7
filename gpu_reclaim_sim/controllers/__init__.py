"""kube-controller-manager's controllers (Deployments, ReplicaSets, StatefulSets, DaemonSets,
endpoints, garbage collection, persistent volumes), the cluster autoscaler and z2jh's user
placeholders."""
