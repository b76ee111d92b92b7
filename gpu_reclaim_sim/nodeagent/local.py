"""What the node agent's machine gives the pods of all its nodes (the `cluster` a pod's worker
reads, sim.kubelet.podworker): the scenario, the folder of the pods' files and logs, the
images, the GPUs, the pods' addresses and their hosts files.

Each pod gets an address of the pods' network of the run's network namespace
(sim.network.namespace: the real API server accepts it in EndpointSlices), or, outside one
(no root), a loopback address (accepted as a pod IP, refused in EndpointSlices); a
hosts file with its own name and the Services' (`hosts`) and the data plane's rules
(`dataplane`), both kept from the real API by sim.nodeagent.nodeservices, which sets them; and the
endpoint of `use_gpu` (`control`, sim.control.ControlServer: the agent sets it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..control import ControlServer
from ..gpu.gpus import GpuFleet
from ..kubelet.images import ImageRegistry
from ..network import namespace
from ..network.addresses import PodNetwork
from ..scenario import Scenario


@dataclass
class NodeLocal:
    scenario: Scenario
    data_dir: Path
    images: ImageRegistry = field(init=False)
    gpus: GpuFleet = field(init=False)
    network: PodNetwork = field(init=False)
    hosts: Any = None  # sim.kubelet.names.HostsFiles
    dataplane: Any = None  # sim.network.dataplane.DataPlane
    control: ControlServer | None = None  # set by the agent

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.images = ImageRegistry(self.scenario)
        self.gpus = GpuFleet(self.scenario)
        self.network = PodNetwork(str(namespace.PODS), service_cidr=str(namespace.SERVICES)) if namespace.inside() \
            else PodNetwork(self.scenario.pod_network, service_cidr=self.scenario.service_network)

    def pod_log_path(self, namespace: str, pod: str, container: str, previous: bool = False) -> Path:
        return paths.pod_log_path(self.data_dir, namespace, pod, container, previous)

    def close(self) -> None:
        self.network.close()
