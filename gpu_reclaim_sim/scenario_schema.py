"""The JSON schema of a scenario file (sim.scenario reads it; docs/sim.md documents it)."""

from __future__ import annotations

from typing import Any

_num_or_str = {"type": ["number", "string"]}
_image: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "size": _num_or_str,
        "entrypoint": {"type": "array", "items": {"type": "string"}},
        "cmd": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "workingDir": {"type": "string"},
        "user": {
            "type": "object",
            "additionalProperties": False,
            "required": ["uid"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "uid": {"type": "integer", "minimum": 0},
                "gid": {"type": "integer", "minimum": 0},
            },
        },
        "stub": {"type": "boolean"},
        # a program the image holds at a path (the key): a program of this machine, bound
        # there, then arguments put before the container's own
        "programs": {"type": "object", "additionalProperties": {
            "type": "array", "minItems": 1, "items": {"type": "string"}}},
    },
}
_taint = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key", "effect"],
    "properties": {
        "key": {"type": "string"},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["nodeGroups"],
    "properties": {
        "name": {"type": "string"},
        "namespaces": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["process", "stub"]},
        "bandwidth": _num_or_str,
        "defaultImageSize": _num_or_str,
        "strictImages": {"type": "boolean"},
        "podNetwork": {"type": "string"},
        "serviceNetwork": {"type": "string"},
        "networkPolicyDeny": {"enum": ["reject", "drop"]},
        "images": {"type": "array", "items": _image},
        "imageDefaults": {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: _image["properties"][k] for k in ("entrypoint", "cmd", "env", "workingDir", "user")},
        },
        "apiserver": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
            },
        },
        "control": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
            },
        },
        "gpu": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "collectionInterval": _num_or_str,
                "idleEngineActive": {"type": "number", "minimum": 0, "maximum": 1},
                "driverVersion": {"type": "string"},
                "kubernetesVirtualGpus": {"type": "boolean"},
                "exporterVersion": {"type": "string"},
                "hostPid": {"type": "boolean"},
                "podUid": {"type": "boolean"},
                "migGpuUtil": {"type": "boolean"},
            },
        },
        "priorityClasses": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "value"],
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "integer"},
                    "globalDefault": {"type": "boolean"},
                    "description": {"type": "string"},
                    "preemptionPolicy": {"enum": ["PreemptLowerPriority", "Never"]},
                },
            },
        },
        "nodeGroups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                    "count": {"type": "integer", "minimum": 0},
                    "cpu": _num_or_str,
                    "memory": _num_or_str,
                    "pods": {"type": "integer", "minimum": 1},
                    "gpus": {"type": "integer", "minimum": 0},
                    "gpuModel": {"type": "string"},
                    "gpuMemory": _num_or_str,
                    # the device plugin's MIG "mixed" strategy, one profile per group
                    "mig": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["profile"],
                        "properties": {
                            "profile": {"type": "string", "pattern": "^[1-7]g\\.[1-9][0-9]*gb$"},
                            "perGpu": {"type": "integer", "minimum": 1, "maximum": 7},
                        },
                    },
                    # its sharing.timeSlicing for nvidia.com/gpu
                    "timeSlicing": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["replicas"],
                        "properties": {
                            "replicas": {"type": "integer", "minimum": 2},
                            "renameByDefault": {"type": "boolean"},
                        },
                    },
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "taints": {"type": "array", "items": _taint},
                    "images": {"type": "array", "items": {"type": "string"}},
                    "bandwidth": _num_or_str,
                    "autoscaler": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "min": {"type": "integer", "minimum": 0},
                            "max": {"type": "integer", "minimum": 0},
                            "scaleUpDelay": _num_or_str,
                            "scaleDownDelay": _num_or_str,
                        },
                    },
                },
            },
        },
        "placeholders": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "count"],
                "properties": {
                    "name": {"type": "string"},
                    "namespace": {"type": "string"},
                    "count": {"type": "integer", "minimum": 0},
                    "priorityClassName": {"type": "string"},
                    "requests": {"type": "object", "additionalProperties": _num_or_str},
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tolerations": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
    },
}
