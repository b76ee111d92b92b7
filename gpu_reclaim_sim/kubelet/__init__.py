"""The kubelet's parts, which the node agent runs for each node (sim.nodeagent): the Node
manifest it registers, one pod worker per pod, what each container starts with,
the container runtime and its sandbox, cgroups, volumes, images."""
