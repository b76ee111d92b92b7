"""The real Kubernetes control plane a run of the simulator stands on (issue 37): the
binaries built from controlplane/'s Go module (`components`), and the run's CA and the
credentials it signs (`credentials`)."""
