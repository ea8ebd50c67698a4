"""A deploy's operation reports survive pyinfra handing a callback its context proxy for the host
(kiln/deploy/events.py): the report runs later in a greenlet of its own, where the proxy has no host."""

from __future__ import annotations

import gevent
from pyinfra.context import ctx_host, host as host_proxy

from kiln.deploy.events import real_host


class _Host:
    name = "node1"


def test_a_proxy_is_resolved_while_its_context_is_set_and_stays_usable_in_a_later_greenlet():
    node = _Host()
    with ctx_host.use(node):
        resolved = real_host(host_proxy)
    assert resolved is node
    assert gevent.spawn(lambda: resolved.name).get(timeout=5) == "node1"
    assert real_host(node) is node  # a real host is passed through


def test_the_proxy_itself_fails_in_a_greenlet_without_context():
    with ctx_host.use(_Host()):
        proxy = host_proxy
        failed = gevent.spawn(lambda: proxy.name)
        failed.join(timeout=5)
    assert failed.exception is not None  # what the reports hit before
