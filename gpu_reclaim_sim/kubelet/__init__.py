"""The kubelet: the Node it registers, one pod worker per pod, what each container starts with,
the container runtime and its sandbox, cgroups, volumes, images."""
