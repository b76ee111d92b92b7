"""The kernels' window when the server stops. On SIGTERM, jupyter-server stops its extensions,
then shuts its kernels down (jupyter_client: an interrupt, a shutdown request, SIGTERM to the
kernel's process group after half of `shutdown_wait_time`, SIGKILL at its end). Its default,
5 s, kills a kernel that saves for longer than 2.5 s, whatever grace period the pod has.

When the spawner gives the server a grace period ($JUPYTERHUB_GPU_RECLAIM_GRACE_PERIOD, set
by GPUReclaimSpawner), this extension's stop hook, which runs before the kernels are shut
down, gives each kernel until the grace period less MARGIN (kept for the server's own exit):
its shutdown wait so that SIGTERM comes at that deadline, and the deadline in a file the
kernel reads at its exit (stopping.py), where the callbacks of `on_reclaim` run
(kernel.py). Kubernetes kills whatever is left at the end of the grace period. A kernel that
exits at once is not waited for: jupyter_client polls it every 0.1 s."""

from __future__ import annotations

import os
import time

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, default

from .stopping import GRACE_ENV, remove_stale, write_deadline

#: seconds of the grace period kept for the server's own exit after its kernels'
MARGIN = 5.0


class KernelWindow(ExtensionApp):
    name = "jupyterhub_gpu_reclaim_lab_window"
    load_other_extensions = True

    grace_period = Float(
        config=True,
        help=f"""Seconds Kubernetes gives this server when it is stopped (default:
        ${GRACE_ENV}, which GPUReclaimSpawner sets from its reclaim_grace_period). Its
        kernels get all but the last {MARGIN:g} s to exit, for their on_reclaim callbacks and
        atexit handlers; 0: jupyter-server's own shutdown wait.""")

    @default("grace_period")
    def _grace_period_default(self) -> float:
        value = os.environ.get(GRACE_ENV, "")
        try:
            return max(0.0, float(value)) if value else 0.0
        except ValueError:
            self.log.warning("GPU reclaim: $%s=%r is not a number of seconds; kernels get no window", GRACE_ENV, value)
            return 0.0

    def initialize_settings(self) -> None:
        assert self.serverapp is not None  # set when the server loads the extension
        remove_stale(self.serverapp.runtime_dir)

    async def stop_extension(self) -> None:
        window = self.grace_period - MARGIN
        manager = getattr(self.serverapp, "kernel_manager", None)
        if window <= 0 or manager is None:
            return
        deadline = time.time() + window
        kernels = list(manager.list_kernel_ids())
        for kernel_id in kernels:
            kernel = manager.get_kernel(kernel_id)
            # jupyter_client sends SIGTERM after half of it: at the deadline
            kernel.shutdown_wait_time = 2 * window
            if getattr(kernel, "connection_file", ""):
                try:
                    write_deadline(kernel.connection_file, deadline)
                except OSError as e:  # the kernel still gets its time, without on_reclaim
                    self.log.warning("GPU reclaim: cannot give kernel %s its deadline: %s", kernel_id, e)
        if kernels:
            self.log.info("GPU reclaim: the server stops; its %d kernel(s) have %.0f s to exit", len(kernels), window)
