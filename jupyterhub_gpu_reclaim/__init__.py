"""jupyterhub-gpu-reclaim: give idle GPUs on a JupyterHub back to the people waiting for them."""

__version__ = "0.1.0"
