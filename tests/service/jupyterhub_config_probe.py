# The service tests' hub (the documented role), for the kernel-probe credential tests:
# - the service's token is known to the tests (to show it never reaches a user's server);
# - a second reclaim service whose role lacks `tokens` and the probe-token scope (so it
#   cannot mint probe tokens);
# - the tests' own service may read and delete users' tokens (to check what was minted), and
#   read the reclaim service's pid (to kill it);
# - no hub-wide cap on API tokens (token_expires_in_max_seconds is off, JupyterHub's default):
#   the probe-token API must bound a probe token's lifetime by itself;
# - a spawn of slowpoke's server stays pending 15 s before its pod is made (a server that is
#   not running yet, with its server record already in the hub's database);
# - a service (no process) that may mint tokens for the group gpu-users only (bob), and one
#   that may mint probe tokens for that group only.
import asyncio
import os

load_subconfig(os.path.join(os.environ["GPU_RECLAIM_REPO"], "tests", "service", "jupyterhub_config_service.py"))  # noqa: F821

c = get_config()  # noqa: F821
(service,) = [s for s in c.JupyterHub.services if s["name"] == "gpu-reclaim"]
service["api_token"] = os.environ["GPU_RECLAIM_SERVICE_TOKEN"]
# run by the tests (an external service: a second managed one would slow the hub's start)
c.JupyterHub.services.append({"name": "gpu-reclaim-notokens", "api_token": os.environ["GPU_RECLAIM_NOTOKENS_TOKEN"]})
(role,) = [r for r in c.JupyterHub.load_roles if r["name"] == "gpu-reclaim"]
c.JupyterHub.load_roles.append({
    "name": "gpu-reclaim-notokens",
    "services": ["gpu-reclaim-notokens"],
    "scopes": [s for s in role["scopes"] if s not in ("tokens", "custom:gpu-reclaim:probe-tokens")],
})
c.JupyterHub.load_roles.append({"name": "tests-tokens", "services": ["tests"],
                                "scopes": ["tokens", "read:services!service=gpu-reclaim"]})  # and its pid

c.JupyterHub.load_groups = {"gpu-users": {"users": ["bob"]}}
c.JupyterHub.services.append({"name": "group-minter", "api_token": os.environ["GPU_RECLAIM_GROUP_MINTER_TOKEN"]})
c.JupyterHub.load_roles.append({"name": "group-minter", "services": ["group-minter"],
                                "scopes": ["tokens!group=gpu-users"]})
c.JupyterHub.services.append({"name": "group-prober", "api_token": os.environ["GPU_RECLAIM_GROUP_PROBER_TOKEN"]})
c.JupyterHub.load_roles.append({"name": "group-prober", "services": ["group-prober"],
                                "scopes": ["custom:gpu-reclaim:probe-tokens!group=gpu-users"]})


async def _slow_spawn(spawner):
    if spawner.user.name == "slowpoke":
        await asyncio.sleep(15)


c.Spawner.pre_spawn_hook = _slow_spawn
