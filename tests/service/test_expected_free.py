"""When a waiting user can expect a GPU (`status.freeing`, `status.expect_free`): only from
reclaims the service has scheduled, in queue order, for GPUs the waiting pod can use."""

from __future__ import annotations


from jupyterhub_gpu_reclaim.policy.observations import Session
from jupyterhub_gpu_reclaim.service.status import Freeing, SessionStatus, WaitingServer, expect_free, freeing
from jupyterhub_gpu_reclaim.wording import expected_free

from ..support.clock import START, at


def waiting(user: str, gpus: int = 1, gpu_type: str = "", shared: bool = False) -> WaitingServer:
    return WaitingServer(session=f"{user}/", user=user, server="", kinds={"gpu": gpus}, since=START, waited_s=0, reason="",
                         gpu_type=gpu_type, gpu_shared=shared)


def info(gpus: int = 1, **kw) -> SessionStatus:
    return SessionStatus(session="u/", user="u", server="", gpus=gpus, **kw)


def test_a_warned_session_frees_its_gpus_at_its_reclaim_time_unless_kept():
    s = Session(id="u/", user="u", server="", gpus=2, started=START, gpu_type="A100")
    now = at(10)
    assert freeing(info(2, warned_at=at(5), reclaim_at=at(20)), s, now) == Freeing(at(20), 2, "A100")
    assert freeing(info(2, stopping=True), s, now) == Freeing(now, 2, "A100")  # its stop is under way
    assert freeing(info(2, reclaim_at=at(20)), s, now) is None  # not warned: no reclaim is scheduled
    assert freeing(info(2, warned_at=at(5), reclaim_at=at(20), intent_until=at(30)), s, now) is None
    assert freeing(info(2, warned_at=at(5), reclaim_at=at(20), exempt_until=at(30)), s, now) is None
    assert freeing(info(0, stopping=True), s, now) is None


def test_the_queue_gets_gpus_in_order_and_only_ones_it_can_use():
    due = [Freeing(at(20), 1), Freeing(at(30), 1, "A100"), Freeing(at(25), 1), Freeing(at(40), 1, gpu_shared=True),
           Freeing(at(50), 2, "A100")]
    a, b, c, d, e = expect_free([waiting("a"), waiting("b"), waiting("c", 2), waiting("d", gpu_type="A100"),
                                 waiting("e", shared=True)], due)
    assert (a.expected_free_at, b.expected_free_at) == (at(20), at(25))  # the first two freed
    # c (any GPU, two) takes the A100 freed at 30 and one of the two at 50, d (an A100) the other
    assert (c.expected_free_at, d.expected_free_at) == (at(50), at(50))
    assert e.expected_free_at == at(40)  # a time-sliced GPU, only for a time-sliced request
    c, d = expect_free([waiting("c", 2), waiting("d", gpu_type="A100")], due[:2])
    assert c.expected_free_at == at(30) and d.expected_free_at is None  # c took the A100: no guess for d
    assert expect_free([waiting("a")], []) == [waiting("a")]  # nothing scheduled, nothing said


def test_the_sentence():
    assert expected_free(at(13), at(10)) == "a GPU is expected to be free in about 3 min"
    assert expected_free(at(10), at(10)) == "a GPU is expected to be free in about 1 min"
