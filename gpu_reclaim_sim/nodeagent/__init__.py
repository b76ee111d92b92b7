"""The node agent on the real control plane (sim.controlplane): `agent` runs a scenario's
nodes, `registration` keeps one node registered and alive, `pods` runs the pods bound to one
(`podwatch` follows them, `podapi` reads and writes for them through the real API, `local`
is what the machine gives them)."""
