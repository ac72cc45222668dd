"""Opening the HA store a URI names: the embedded store on a shared file system
(:mod:`epochal.control.ha.files`) or ZooKeeper (:mod:`epochal.control.ha.zookeeper`), both behind
the :class:`~epochal.control.ha.services.HaServices` interface. Kept apart from the interface so
that neither implementation and the interface import each other; kazoo is imported only for a
ZooKeeper URI."""

from __future__ import annotations

from epochal.control.ha.services import HaServices


def open_services(uri: str, job_id: str, *, session_timeout: float = 5.0,
                  connect_timeout: float = 10.0) -> HaServices:
    """The HA services for ``job_id`` at ``uri``: ``zookeeper://host:port[,host:port]/root``, or a
    ``file://`` URI or path (a local disk or shared POSIX mount). Raises
    :class:`~epochal.errors.HighAvailabilityError` (storage not writable, ZooKeeper unreachable
    within ``connect_timeout`` seconds) with one readable sentence."""
    if uri.startswith("zookeeper://") or uri.startswith("zk://"):
        from epochal.control.ha.zookeeper import ZooKeeperHaServices

        return ZooKeeperHaServices(uri, job_id, session_timeout=session_timeout, connect_timeout=connect_timeout)
    from epochal.control.ha.files import FileHaServices

    return FileHaServices(uri, job_id)
