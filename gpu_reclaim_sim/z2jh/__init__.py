"""Zero to JupyterHub on the simulated cluster: the release (`release`) and the `jupyterhub-gpu-
reclaim-sim demo` command (`demo`)."""
