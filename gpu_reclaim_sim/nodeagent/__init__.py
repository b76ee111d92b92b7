"""The node agent on the real control plane (sim.controlplane): `agent` runs a scenario's
nodes, `registration` keeps one node registered and alive."""
