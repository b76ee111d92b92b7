# The tests' JupyterHub: the demo's configuration, plus an API token for the tests.
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "gpu_reclaim_sim", "demo_config",  # noqa: F821
                            "jupyterhub_config.py"))

c = get_config()  # noqa: F821
# The harness's own tests run the unmodified KubeSpawner and no reclaim service; the
# product's tests add GPUReclaimSpawner, the service and its pages on top of this file.
c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.JupyterHub.template_paths = []
c.JupyterHub.pop("extra_user_scopes", None)  # the demo's, on JupyterHub 6 (on 5: in load_roles)
c.JupyterHub.custom_scopes = {}
c.JupyterHub.extra_handlers = []  # the demo's probe-token API (configure_hub)
c.Spawner.pop("server_token_scopes", None)  # the demo's JupyterLab extension wiring
c.Spawner.pop("environment", None)
c.GPUReclaimSpawner.pop("reclaim_service_url", None)  # the demo's link to its service (link_to_service)
c.GPUReclaimSpawner.pop("reclaim_service_token", None)
c.JupyterHub.services = [{"name": "tests", "api_token": os.environ["GPU_RECLAIM_TEST_TOKEN"]}]
c.JupyterHub.load_roles = [{
    "name": "tests",
    "services": ["tests"],
    "scopes": ["admin:users", "admin:servers", "access:servers", "access:services", "read:hub"],
}]
c.JupyterHub.db_url = "sqlite:///" + os.path.join(os.getcwd(), "jupyterhub.sqlite")
c.KubeSpawner.start_timeout = 180
c.Spawner.poll_interval = 10  # the hub notices a vanished pod sooner than its default 30 s
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}  # POST /server answers 202 at once, as the spawn page sees it
