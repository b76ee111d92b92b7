"""The kernel's window at a reclaim: a server that the reclaim service stops gets
`reclaim_grace_period` seconds before Kubernetes kills its processes, where KubeSpawner gives
every stop `delete_grace_period` (1 s). The service stops servers through the hub's API only,
as before; the spawner, asked to stop, asks the service whether a reclaim of this server is
under way (the service records each one before it stops the server) and deletes the pod with
the longer grace period if so. A user's own stop keeps delete_grace_period.

The server learns the window from its environment ($JUPYTERHUB_GPU_RECLAIM_GRACE_PERIOD):
jupyterhub-gpu-reclaim-lab, on the server's SIGTERM, lengthens its kernels' shutdown wait to
fit the window and tells the kernels their deadline (docs/lab.md). A server whose processes
exit at once is not slowed: the grace period bounds the stop, the pod goes when they exit."""

from __future__ import annotations

from typing import Any

from traitlets import Integer

from .service_link import ServiceLink

#: the server's environment variable with the grace period (read by jupyterhub_gpu_reclaim_lab)
GRACE_ENV = "JUPYTERHUB_GPU_RECLAIM_GRACE_PERIOD"
#: a reclaim counts as under way while its record is unfinished (null) or stuck (retried)
UNDER_WAY = (None, "stuck")


class ReclaimWindow(ServiceLink):
    reclaim_grace_period = Integer(
        60, min=10, max=240, config=True,
        help="""Seconds a server stopped by a reclaim of jupyterhub-gpu-reclaim gets before
        its processes are killed (the pod's deletion grace period; 10 to 240), so that its
        kernels can save their work (docs/lab.md). A server whose processes exit at once
        goes at once; a user's own stop gets delete_grace_period. Needs reclaim_service_url
        and reclaim_service_token; the service's stop_timeout must be longer.""")

    # KubeSpawner's and JupyterHub's options (untyped there), set for a reclaim's stop below
    delete_grace_period: int
    start_timeout: int

    def get_env(self) -> dict[str, Any]:
        env = super().get_env()
        env[GRACE_ENV] = str(self.reclaim_grace_period)
        return env

    async def stop(self, now: bool = False) -> None:
        grace = 0 if now else await self._reclaim_grace()
        if grace <= self.delete_grace_period:
            await super().stop(now)
            return
        self.log.info("stopping %s with the reclaim's grace period, %d s", self._log_name, grace)
        # KubeSpawner's stop reads both, for this stop only: the pod's grace period, and how
        # long it waits for the pod to go
        plain = self.delete_grace_period, self.start_timeout
        self.delete_grace_period, self.start_timeout = grace, max(self.start_timeout, grace + 60)
        try:
            await super().stop(now)
        finally:
            self.delete_grace_period, self.start_timeout = plain

    async def _reclaim_grace(self) -> int:
        """reclaim_grace_period when the service is reclaiming this server, else 0 (also
        when the service cannot be asked: a stop never waits for it)."""
        if not (self.reclaim_service_url and self.reclaim_service_token):
            return 0
        try:
            body = await self._ask_service("reclaims", user=self.user.name, since="1d")
        except Exception as e:
            self.log.warning("stop of %s: cannot ask the reclaim service whether it reclaims the server (%s); "
                             "grace period %d s", self._log_name, e, self.delete_grace_period)
            return 0
        reclaims = body.get("reclaims") if isinstance(body, dict) else None
        under_way = any(isinstance(r, dict) and r.get("server") == self.name and "outcome" in r
                        and r["outcome"] in UNDER_WAY for r in reclaims or [])
        return self.reclaim_grace_period if under_way else 0
