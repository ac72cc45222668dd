"""High availability of the driver (papers/001 §4.5): passive standby drivers, leader election
with fencing tokens, and the stores a new leader resumes from (docs/high_availability.md).

``records`` (what is stored), ``services`` (the interface), ``stores`` (opening the store a URI
names: :func:`~epochal.control.ha.stores.open_services`), ``files`` (the embedded implementation
on a shared file system), ``zookeeper`` (ZooKeeper through kazoo), ``election`` (the election as
a pure state machine), ``driver`` (its thread), ``fencing`` (the JobMaster's fenced checkpoint
I/O and the exact checkpoint id counter), ``orphans`` (what a new leader removes of its
predecessors' checkpoints), ``leadership`` (running a job with HA: standby, leader, takeover,
end; :func:`~epochal.control.ha.leadership.lead`, for every kind that supports it: dataflow,
graph).
"""
