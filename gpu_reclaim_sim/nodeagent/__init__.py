"""The node agent on the real control plane (sim.controlplane): `agent` runs a scenario's
nodes, `registration` keeps one node registered and alive, `nodepods` runs the pods bound to one
(`podwatch` follows them, `apipodapi` reads and writes for them through the real API, `local`
is what the machine gives them), `kubeletserver` serves each node's kubelet API (`kubeletauth`,
`kubeletlogs`, `containerstreams`), and `nodeservices` with `networkplugin` give the pods Services,
names and NetworkPolicy."""
