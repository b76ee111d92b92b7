"""jupyterhub-gpu-reclaim: give idle GPUs on a JupyterHub back to the people waiting for them."""

__version__ = "0.1.0"

#: where the service keeps its records unless --store-url names another database, and what
#: `backtest --from-store` reads unless --store does (store.engine opens it; declared here, in
#: the package's light root, so that the command's help states it without loading SQLAlchemy)
DEFAULT_STORE_URL = "sqlite:///gpu_reclaim.sqlite"
