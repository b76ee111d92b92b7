"""The reclaim policy: pure functions of what is known about a session, no I/O, the clock an
argument. `observations` (what the policy reads and returns: sessions, samples, decisions),
`config` (its settings), `rules` (settings by profile, group, user), `readings` (what one
sample says), `scan` (what a session's samples say over time), `decider` (`decide`: the
decision for a GPU session) and `culler` (servers without GPUs and users, as
jupyterhub-idle-culler)."""
