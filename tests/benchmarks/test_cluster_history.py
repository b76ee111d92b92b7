"""The report benchmark's history (benchmarks/support/cluster_history.py) is the mess issue 36
asks for, checked on what it writes: pods of 400 users landing on whichever of 200 GPUs is
free (no GPU held twice, no user with two sessions at once, z2jh pod names on many GPUs),
at least 10,000 sessions in 30 days, some waiting for a GPU and handed one inside a scrape;
kube-state-metrics' label styles before and after its upgrade, a request series that gains
`node`, an exporter outage while kube-state-metrics shows the pods Running."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

import pytest

from benchmarks.support.cluster_history import DAY, GPUS_PER_NODE, OUTAGE, UPGRADE, schedule, write_history

START = 1_700_006_400  # a UTC midnight


@pytest.fixture(scope="module")
def month():
    return schedule(200, 400, 30, 1)


def test_the_scheduler_places_pods_on_any_free_gpu(month):
    assert len(month) >= 10_000
    placed = [s for s in month if s.gpu is not None]
    for key in ("gpu", "user"):  # a GPU holds one pod at a time; a user has one session at a time
        spans = defaultdict(list)
        for s in placed:
            spans[getattr(s, key)].append((s.scheduled if key == "gpu" else s.created, s.end))
        for found in spans.values():
            found.sort()
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(found))
    gpus_of = defaultdict(set)
    for s in placed:
        gpus_of[s.pod].add(s.gpu)
    assert len(gpus_of) == 400 and min(len(g) for g in gpus_of.values()) > 5  # a pod name on many GPUs
    assert len({(s.gpu, s.pod) for s in placed}) > 10_000
    waited = [s for s in placed if s.scheduled - s.created > 30]
    assert len(waited) > 20
    handed = [s for s in waited if any(o.gpu == s.gpu and 0 < s.scheduled - o.end <= 20 for o in placed)]
    assert len(handed) == len(waited)  # each got a GPU seconds after its holder ended
    assert len({s.uid for s in month}) == len(month)


def test_what_a_day_writes(tmp_path, month):
    window = 30 * DAY
    node, at, lasts = OUTAGE
    outage = (at * window, at * window + lasts)
    upgrade = UPGRADE * window + 5 * 3600
    waited = next(s for s in month if s.gpu is not None and s.scheduled - s.created > 30 and s.created > upgrade
                  and s.created // DAY == s.scheduled // DAY)
    days = sorted({int(outage[0] // DAY), int(upgrade // DAY), int(waited.created // DAY)})
    text = ""
    for day in days:
        write_history(tmp_path / "day.om", START, month, 200, 30, 60, 1, day)
        text += (tmp_path / "day.om").read_text()
    lines = text.splitlines()
    # the outage: no sample of the node's GPUs in it, while its pods are Running
    gone = [ln for ln in lines if ln.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'Hostname="gpu-node-{node}"' in ln
            and START + outage[0] <= float(ln.rsplit(" ", 1)[1]) < START + outage[1]]
    assert gone == []
    running = [s for s in month if s.gpu is not None and s.gpu // GPUS_PER_NODE == node
               and s.running < outage[0] and s.end > outage[1]]
    assert running
    pod = running[0].pod
    assert any(ln.startswith("kube_pod_status_phase{") and f'exported_pod="{pod}"' in ln and 'phase="Running"' in ln
               and START + outage[0] <= float(ln.rsplit(" ", 1)[1]) < START + outage[1] and " 1 " in ln for ln in lines)
    # kube-state-metrics 1.x writes every label and no uid, 2.x the allow-listed ones, uid and the profile
    labels = [ln for ln in lines if ln.startswith("kube_pod_labels{")]
    assert any("label_component=" in ln and "uid=" not in ln for ln in labels)
    assert any("label_component=" not in ln and "uid=" in ln for ln in labels)
    assert any(ln.startswith("kube_pod_annotations{") and "annotation_jupyterhub_gpu_reclaim_profile=" in ln
               for ln in lines)
    # a pod that waited: its request series without node, then with it
    requests = {re.sub(r" \S+ \S+$", "", ln) for ln in lines if ln.startswith("kube_pod_container_resource_requests{")
                and f'uid="{waited.uid}"' in ln}
    assert len(requests) == 2 and sum('node="' in r for r in requests) == 1
